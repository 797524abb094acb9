"""The typed shape of the objects nested in Realtime client events, and OpenAI's errors for them.

``protocol/realtime/client.py`` keeps ``session``, ``item`` and ``response`` as plain
dicts, because what they mean depends on the session's state
(``voice/config.py``, ``voice/conversation.py``). Their *types* do not: a role
is a string, a timeout an integer in range. Checking them here, at decode time,
means no wrong type (a list where a string is due, an integer of 400 digits)
ever reaches the core, where it would raise something other than our typed
errors (``TypeError: unhashable type``, ``OverflowError``) and end the session.

The structs name the fields livegen reads, GA and beta spellings both; any
other field passes unchecked, as before (OpenAI fields we ignore). Validation
builds structs that are then thrown away: the dicts go on unchanged.

``explain`` turns a ``msgspec.ValidationError`` into OpenAI's error: the code
``invalid_type`` for a wrong type, ``missing_required_parameter`` for a missing
field and ``invalid_value`` for a value out of range, with the dotted ``param``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from livegen.errors import RemoteProtocolError
from livegen.protocol import errors

#: Milliseconds and positions: an int a float can hold exactly (so ``float(x)`` never overflows).
Count = Annotated[int, msgspec.Meta(ge=0, le=2**53 - 1)]
#: ``idle_timeout_ms``: OpenAI documents no lower bound below its default range; livegen takes
#: 100 ms .. 1 h (below 100 ms an idle answer would follow every answer at once).
IdleTimeoutMs = Annotated[int, msgspec.Meta(ge=100, le=3_600_000)]


class _Shape(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Unknown fields are allowed (OpenAI fields livegen ignores)."""


class AudioFormatShape(_Shape, kw_only=True):
    type: str | None = None
    rate: int | None = None


class TurnDetectionShape(_Shape, kw_only=True):
    type: str | None = None
    threshold: float | None = None
    prefix_padding_ms: Count | None = None
    silence_duration_ms: Count | None = None
    create_response: bool | None = None
    interrupt_response: bool | None = None
    idle_timeout_ms: IdleTimeoutMs | None = None
    eagerness: str | None = None


class TranscriptionShape(_Shape, kw_only=True):
    model: str | None = None
    language: str | None = None
    prompt: str | None = None


class AudioInputShape(_Shape, kw_only=True):
    format: AudioFormatShape | str | None = None
    turn_detection: TurnDetectionShape | None = None
    transcription: TranscriptionShape | None = None
    noise_reduction: dict[str, Any] | None = None


class AudioOutputShape(_Shape, kw_only=True):
    format: AudioFormatShape | str | None = None
    voice: str | None = None
    speed: float | None = None


class AudioShape(_Shape, kw_only=True):
    input: AudioInputShape | None = None
    output: AudioOutputShape | None = None


class SessionShape(_Shape, kw_only=True):
    type: str | None = None
    model: str | None = None
    instructions: str | None = None
    output_modalities: list[str] | None = None
    modalities: list[str] | None = None
    audio: AudioShape | None = None
    voice: str | None = None
    input_audio_format: AudioFormatShape | str | None = None
    output_audio_format: AudioFormatShape | str | None = None
    turn_detection: TurnDetectionShape | None = None
    input_audio_transcription: TranscriptionShape | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    temperature: float | None = None
    max_output_tokens: int | Literal["inf"] | None = None
    max_response_output_tokens: int | Literal["inf"] | None = None


class ContentPartShape(_Shape, kw_only=True):
    type: str | None = None
    text: str | None = None
    transcript: str | None = None
    audio: str | None = None


class ItemShape(_Shape, kw_only=True):
    id: str | None = None
    type: str | None = None
    object: str | None = None
    status: str | None = None
    role: str | None = None
    content: list[ContentPartShape] | None = None


class ResponseShape(_Shape, kw_only=True):
    instructions: str | None = None
    output_modalities: list[str] | None = None
    modalities: list[str] | None = None
    conversation: str | None = None
    voice: str | None = None
    metadata: dict[str, Any] | None = None


#: Field of a client event -> the shape its dict must have.
NESTED: dict[str, type[_Shape]] = {"session": SessionShape, "item": ItemShape, "response": ResponseShape}


def check_nested(field: str, value: dict[str, Any], event_id: str | None) -> None:
    """Raise an ``InvalidRequest`` when ``value`` (the event's ``field``) has a wrong type or range."""
    try:
        msgspec.convert(value, NESTED[field])
    except msgspec.ValidationError as exc:
        raise explain(exc, field, event_id) from None


def explain(exc: msgspec.ValidationError, prefix: str, event_id: str | None) -> RemoteProtocolError:
    """OpenAI's error for a validation failure at ``prefix`` (the dotted path of the object)."""
    detail, _, where = str(exc).partition(" - at `$")
    path = ".".join(part for part in (prefix, where.rstrip("`").lstrip(".")) if part)
    if "missing required field `" in detail:
        name = detail.split("`")[1]
        param = f"{path}.{name}" if path else name
        return errors.MISSING_REQUIRED_PARAMETER.error(name=param, param=param, event_id=event_id)
    if detail.startswith("Expected `") and ", got `" in detail:
        expected, got = detail.split("`")[1], detail.split("`")[3]
        text = f"Invalid type for '{path}': expected {_article(expected)}, but got {_article(got)} instead."
        return errors.INVALID_TYPE.error(detail=text, param=path or None, event_id=event_id)
    text = f"Invalid value for '{path}': {detail}."
    return errors.INVALID_VALUE.error(detail=text, param=path or None, event_id=event_id)


_NAMES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "null": "null"}


def _article(kind: str) -> str:
    kinds = [k for k in kind.split(" | ") if k != "null"] or ["null"]
    name = " or ".join(_NAMES.get(k, k) for k in kinds)
    return ("an " if name[0] in "aeiou" else "a ") + name
