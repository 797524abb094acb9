"""The typed shape of the objects nested in Realtime client events, and OpenAI's errors for them.

``session.update``'s ``session`` decodes into ``SessionShape``: typed structs
whose every field defaults to ``UNSET``, so that a partial update tells a field
left out (keep the session's value) from one sent as null (``turn_detection:
null`` turns turn detection off). What the fields mean depends on the session's
state, so ``voice/config.py`` applies them; their *types* do not, so they are
checked here, at decode time, and no wrong type (a list where a string is due,
an integer of 400 digits) ever reaches the core, where it would raise something
other than our typed errors and end the session. ``decode_session`` is the same
decode for a session given outside an event (a client secret's).

``item`` and ``response`` stay plain dicts in their events
(``voice/conversation.py`` and ``voice/options.py`` read them); ``check_nested``
validates them against ``ItemShape`` and ``ResponseShape`` and throws the
structs away.

The structs name the fields livegen reads, GA and beta spellings both; any
other field passes unchecked (OpenAI fields we ignore).

``explain`` turns a ``msgspec.ValidationError`` into OpenAI's error: the code
``invalid_type`` for a wrong type, ``missing_required_parameter`` for a missing
field and ``invalid_value`` for a value out of range, with the dotted ``param``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET

from livegen.errors import RemoteProtocolError
from livegen.protocol import errors

#: Milliseconds and positions: an int a float can hold exactly (so ``float(x)`` never overflows).
Count = Annotated[int, msgspec.Meta(ge=0, le=2**53 - 1)]
#: ``idle_timeout_ms``: OpenAI documents no lower bound below its default range; livegen takes
#: 100 ms .. 1 h (below 100 ms an idle answer would follow every answer at once).
IdleTimeoutMs = Annotated[int, msgspec.Meta(ge=100, le=3_600_000)]


#: A field of the session object that a ``session.update`` may leave out (UNSET: keep the
#: session's value), send as null (None: for ``turn_detection``, turn detection off) or set.
Opt = msgspec.UnsetType


class _Patch(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A part of the session object as a ``session.update`` sends it: every field may be absent.

    Unknown fields are allowed (OpenAI fields livegen ignores). A field typed ``Any`` is one
    whose refusal ``voice/config.py`` words itself (the rates, ``truncation``...):
    its type is checked there, in the order the session applies its fields.
    """


class AudioFormatShape(_Patch, kw_only=True):
    type: str | Opt | None = UNSET
    rate: int | Opt | None = UNSET


class TurnDetectionShape(_Patch, kw_only=True):
    type: str | Opt | None = UNSET
    threshold: float | Opt | None = UNSET
    prefix_padding_ms: Count | Opt | None = UNSET
    silence_duration_ms: Count | Opt | None = UNSET
    create_response: bool | Opt | None = UNSET
    interrupt_response: bool | Opt | None = UNSET
    idle_timeout_ms: IdleTimeoutMs | Opt | None = UNSET
    eagerness: str | Opt | None = UNSET


class TranscriptionShape(_Patch, kw_only=True):
    model: str | Opt | None = UNSET
    language: str | Opt | None = UNSET
    prompt: str | Opt | None = UNSET
    #: Words or phrases that steer the recogniser (``voice/config.py`` bounds them).
    keywords: list[str] | Opt | None = UNSET
    #: How long live captions wait: "minimal" .. "xhigh" (checked in ``voice/config.py``).
    delay: str | Opt | None = UNSET


class NoiseReductionShape(_Patch, kw_only=True):
    #: "near_field" or "far_field" (``voice/config.py`` checks the value).
    type: str | Opt = UNSET


class ReasoningShape(_Patch, kw_only=True):
    #: "minimal" .. "xhigh" (``voice/config.py`` checks the value); null: the model's own.
    effort: str | Opt | None = UNSET


class AudioInputShape(_Patch, kw_only=True):
    format: AudioFormatShape | str | Opt | None = UNSET
    turn_detection: TurnDetectionShape | Opt | None = UNSET
    transcription: TranscriptionShape | Opt | None = UNSET
    noise_reduction: NoiseReductionShape | Opt | None = UNSET
    #: vllm-omni's duplex clients name the PCM input rate here (or on the session).
    sample_rate_hz: Any = UNSET


class AudioOutputShape(_Patch, kw_only=True):
    format: AudioFormatShape | str | Opt | None = UNSET
    voice: str | Opt | None = UNSET
    speed: float | Opt | None = UNSET
    sample_rate_hz: Any = UNSET


class AudioShape(_Patch, kw_only=True):
    input: AudioInputShape | Opt | None = UNSET
    output: AudioOutputShape | Opt | None = UNSET


class SessionShape(_Patch, kw_only=True):
    """``session.update``'s ``session``: GA's nested fields, beta's flat ones, vllm-omni's rates."""

    type: str | Opt | None = UNSET
    model: str | Opt | None = UNSET
    instructions: str | Opt | None = UNSET
    output_modalities: list[str] | Opt | None = UNSET
    modalities: list[str] | Opt | None = UNSET
    audio: AudioShape | Opt | None = UNSET
    voice: str | Opt | None = UNSET
    input_audio_format: AudioFormatShape | str | Opt | None = UNSET
    output_audio_format: AudioFormatShape | str | Opt | None = UNSET
    turn_detection: TurnDetectionShape | Opt | None = UNSET
    input_audio_transcription: TranscriptionShape | Opt | None = UNSET
    input_audio_noise_reduction: NoiseReductionShape | Opt | None = UNSET
    #: Extra fields for server events: only "item.input_audio_transcription.logprobs" (checked there).
    include: list[str] | Opt | None = UNSET
    #: Tools keep their JSON shape: ``voice/tools.py`` parses them (for ``response.create`` too).
    tools: list[dict[str, Any]] | Opt | None = UNSET
    tool_choice: str | dict[str, Any] | Opt | None = UNSET
    temperature: float | Opt | None = UNSET
    max_output_tokens: int | Literal["inf"] | Opt | None = UNSET
    max_response_output_tokens: int | Literal["inf"] | Opt | None = UNSET
    sample_rate_hz: Any = UNSET
    truncation: Any = UNSET
    #: gpt-realtime-2's ``reasoning``: its ``effort`` goes to the language model.
    reasoning: ReasoningShape | Opt | None = UNSET


def decode_session(session: object, event_id: str | None = None) -> SessionShape:
    """A ``session`` object (``session.update``'s, or a client secret's) as typed fields."""
    try:
        return msgspec.convert(session, SessionShape)
    except msgspec.ValidationError as exc:
        raise explain(exc, "session", event_id) from None


def parse_truncation(value: Any, param: str) -> str | float:
    """OpenAI's ``truncation``: "auto", "disabled", or a ``retention_ratio`` object.

    Applied in the session's order of fields (``voice/config.py``), after the fields before it."""
    if value in ("auto", "disabled"):
        return str(value)
    if isinstance(value, dict) and value.get("type") == "retention_ratio":
        ratio = value.get("retention_ratio")
        if isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and 0.0 < ratio <= 1.0:
            return float(ratio)
        detail = f"{param}.retention_ratio must be a number in (0, 1], got {ratio!r}"
        raise errors.INVALID_VALUE.error(detail=detail, param=f"{param}.retention_ratio")
    detail = f"{param} must be 'auto', 'disabled' or a retention_ratio object, got {value!r}"
    raise errors.INVALID_VALUE.error(detail=detail, param=param)


class _Shape(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Unknown fields are allowed (OpenAI fields livegen ignores)."""


class ContentPartShape(_Shape, kw_only=True):
    type: str | None = None
    text: str | None = None
    transcript: str | None = None
    audio: str | None = None
    #: ``input_image``'s data URI and detail (``voice/conversation.py`` checks the values).
    image_url: str | None = None
    detail: str | None = None


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
    reasoning: ReasoningShape | None = None


#: Field of a client event -> the shape its dict must have.
NESTED: dict[str, type[_Shape]] = {"item": ItemShape, "response": ResponseShape}


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
