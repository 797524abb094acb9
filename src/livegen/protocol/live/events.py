"""OpenAI's GPT-Live wire (``/v1/live/sessions``), typed both ways with msgspec.

The shapes are the openai SDK 3.57's (``openai/types/live/``): client events
decode strictly (an unknown field anywhere is OpenAI's ``unknown_parameter``,
so a typo never silently changes a session), server events encode with
exactly the SDK's fields. What the events *mean* for a voice session is the
dialect's (``protocol/live/dialect.py``); this module only owns their shape.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from livegen.errors import RemoteProtocolError
from livegen.protocol import errors as wire_errors
from livegen.protocol.realtime.fields import explain

_STRICT: dict[str, Any] = {"forbid_unknown_fields": True, "kw_only": True}


# --- the session's configuration (session.start's ``session``) ---------------------------
class Pcm(msgspec.Struct, tag_field="type", tag="audio/pcm", **_STRICT):
    rate: Literal[16000, 24000] = 24_000


class Pcmu(msgspec.Struct, tag_field="type", tag="audio/pcmu", **_STRICT):
    rate: int = 8000


class Pcma(msgspec.Struct, tag_field="type", tag="audio/pcma", **_STRICT):
    rate: int = 8000


AudioFormat = Pcm | Pcmu | Pcma


class AudioOutput(msgspec.Struct, omit_defaults=True, **_STRICT):
    voice: str | dict[str, Any] | None = None


class Audio(msgspec.Struct, omit_defaults=True, **_STRICT):
    format: AudioFormat | None = None
    output: AudioOutput | None = None


class ClientDelegation(msgspec.Struct, tag_field="type", tag="client", omit_defaults=True, **_STRICT):
    acknowledgement_delay_ms: int | None = None


class ResponsesDelegation(msgspec.Struct, tag_field="type", tag="responses", omit_defaults=True, **_STRICT):
    #: The Responses backend's model, instructions and tools (the SDK's ``ResponsesDelegationConfig``).
    responses: dict[str, Any] | None = None
    acknowledgement_delay_ms: int | None = None


class DecisionsDelegation(msgspec.Struct, tag_field="type", tag="decisions", omit_defaults=True, **_STRICT):
    decisions: dict[str, Any] | None = None
    acknowledgement_delay_ms: int | None = None


Delegation = ClientDelegation | ResponsesDelegation | DecisionsDelegation


class TextPart(msgspec.Struct, omit_defaults=True, **_STRICT):
    text: str
    type: str | None = None


class InitialItem(msgspec.Struct, omit_defaults=True, **_STRICT):
    role: Literal["developer", "user", "assistant"]
    content: list[TextPart]
    id: str | None = None
    status: Literal["incomplete", "completed"] | None = None
    type: Literal["message"] | None = None


class SessionConfig(msgspec.Struct, omit_defaults=True, **_STRICT):
    model: str
    audio: Audio | None = None
    client: dict[str, Any] | None = None
    delegation: Delegation | None = None
    input: list[InitialItem] | None = None
    instructions: str | None = None
    safety_identifier: str | None = None
    store: bool | None = None
    triggers: list[dict[str, Any]] | None = None


class SessionUpdateConfig(msgspec.Struct, omit_defaults=True, **_STRICT):
    delegation: Delegation | None = None
    triggers: list[dict[str, Any]] | None = None


# --- client events ---------------------------------------------------------------------
class ClientEvent(msgspec.Struct, tag_field="type", **_STRICT):
    event_id: str | None = None


class SessionStart(ClientEvent, tag="session.start", kw_only=True):
    session: SessionConfig


class SessionUpdate(ClientEvent, tag="session.update", kw_only=True):
    session: SessionUpdateConfig


class InputAudioAppend(ClientEvent, tag="session.input_audio.append", kw_only=True):
    audio: str


class InputAudioMute(ClientEvent, tag="session.input_audio.mute", kw_only=True):
    pass


class InputAudioUnmute(ClientEvent, tag="session.input_audio.unmute", kw_only=True):
    pass


class OutputAudioFixturePlay(ClientEvent, tag="session.output_audio_fixture.play", kw_only=True):
    fixture: dict[str, Any] | None = None


class InstructionsAppend(ClientEvent, tag="session.instructions.append", kw_only=True):
    content: str
    delegation_id: str | None = None


class ThinkingAppend(ClientEvent, tag="session.thinking.append", kw_only=True):
    content: str
    delegation_id: str | None = None


class CommentaryAppend(ClientEvent, tag="session.commentary.append", kw_only=True):
    content: str
    delegation_id: str | None = None


class ResponseItemCreate(ClientEvent, tag="response.item.create", kw_only=True):
    item: dict[str, Any]


class ResponseCreate(ClientEvent, tag="response.create", kw_only=True):
    pass


class SessionClose(ClientEvent, tag="session.close", kw_only=True):
    pass


Append = InstructionsAppend | ThinkingAppend | CommentaryAppend
CLIENT_EVENTS: dict[str, type[ClientEvent]] = {
    cls.__struct_config__.tag: cls  # type: ignore[misc]
    for cls in (
        SessionStart,
        SessionUpdate,
        InputAudioAppend,
        InputAudioMute,
        InputAudioUnmute,
        OutputAudioFixturePlay,
        InstructionsAppend,
        ThinkingAppend,
        CommentaryAppend,
        ResponseItemCreate,
        ResponseCreate,
        SessionClose,
    )
}
#: The SDK's client events livegen does not serve (Decisions delegation): refused by name.
UNSERVED_EVENTS = ("decision.create", "decision.item.create", "decision.item.delete")

_decoder = msgspec.json.Decoder()


def decode(text: str | bytes) -> ClientEvent:
    """One client event from one message; raises OpenAI's error for a bad one."""
    try:
        raw = _decoder.decode(text)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise wire_errors.INVALID_JSON.error(detail=exc) from None
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        raise wire_errors.INVALID_EVENT.error(detail="an event must be a JSON object with a 'type'")
    event_id = raw.get("event_id") if isinstance(raw.get("event_id"), str) else None
    kind = raw.pop("type")
    cls = CLIENT_EVENTS.get(kind)
    if cls is None:
        supported = ", ".join(repr(name) for name in CLIENT_EVENTS)
        if kind in UNSERVED_EVENTS:
            raise wire_errors.LIVE_UNSUPPORTED.error(name=kind, detail="Decisions delegation is not served")
        raise wire_errors.UNKNOWN_EVENT_TYPE.error(event_type=kind, supported=supported, event_id=event_id)
    try:
        return msgspec.convert(raw, cls)
    except msgspec.ValidationError as exc:
        raise _explain(exc, event_id) from None


def _explain(exc: msgspec.ValidationError, event_id: str | None) -> RemoteProtocolError:
    detail, _, where = str(exc).partition(" - at `$")
    if detail.startswith("Object contains unknown field `"):
        path = ".".join(p for p in (where.rstrip("`").lstrip("."), detail.split("`")[1]) if p)
        return wire_errors.UNKNOWN_PARAMETER.error(name=path, param=path, event_id=event_id)
    return explain(exc, "", event_id)


# --- server events ---------------------------------------------------------------------
class ServerEvent(msgspec.Struct, tag_field="type", kw_only=True):
    event_id: str


class Replying(ServerEvent, kw_only=True):
    """A server event that answers one client event (``client_event_id``, when it had an id)."""

    client_event_id: str | None = None


class SessionStarted(Replying, tag="session.started", kw_only=True):
    session: dict[str, Any]


class SessionUpdated(Replying, tag="session.updated", kw_only=True):
    session: dict[str, Any]


class InputAudioMuted(Replying, tag="session.input_audio.muted", kw_only=True):
    pass


class InputAudioUnmuted(Replying, tag="session.input_audio.unmuted", kw_only=True):
    pass


class InstructionsAppended(Replying, tag="session.instructions.appended", kw_only=True):
    start_ms: int
    end_ms: int


class ThinkingAppended(Replying, tag="session.thinking.appended", kw_only=True):
    start_ms: int
    end_ms: int


class CommentaryAppended(Replying, tag="session.commentary.appended", kw_only=True):
    start_ms: int
    end_ms: int


class OutputAudioDelta(msgspec.Struct, tag_field="type", tag="session.output_audio.delta", kw_only=True):
    """The SDK's ``OutputAudioDeltaEvent`` has no ``event_id``: a frame of the output stream."""

    delta: str
    start_ms: int
    end_ms: int


class InputTranscriptDelta(Replying, tag="session.input_transcript.delta", kw_only=True):
    delta: str
    start_ms: int
    end_ms: int


class OutputTranscriptDelta(Replying, tag="session.output_transcript.delta", kw_only=True):
    delta: str
    start_ms: int
    end_ms: int


class DelegationRef(msgspec.Struct, kw_only=True):
    """The SDK's ``Delegation``: metadata of delegated work, never its task text."""

    id: str
    target: Literal["client", "responses", "decisions"]
    type: Literal["delegation"] = "delegation"


class ResponseEvent(Replying, tag="response.event", kw_only=True):
    """The SDK's ``ResponseEvent``: one event of a Responses-delegated task's stream, by delegation."""

    event: dict[str, Any]
    delegation_id: str | None = None


class DelegationCreated(Replying, tag="session.delegation.created", kw_only=True):
    delegation: DelegationRef
    #: Where on the session's timeline (ms of input audio) the model delegated.
    offset_ms: int


class Usage(msgspec.Struct, kw_only=True, omit_defaults=True):
    #: Whole seconds the session has run (OpenAI bills GPT-Live by the second).
    seconds: float
    #: A WebRTC session's breakdown: inference never pauses here, so all of it is active.
    active_seconds: int | None = None
    paused_seconds: int | None = None


class ContextWindow(msgspec.Struct, kw_only=True):
    usage_ratio: float


class SessionUsageUpdated(Replying, tag="session.usage.updated", kw_only=True):
    usage: Usage
    context_window: ContextWindow | None = None


CloseReason = Literal["close_requested", "expired", "content", "remote_hangup", "connection_lost"]


class SessionClosed(Replying, tag="session.closed", kw_only=True):
    reason: CloseReason
    session: dict[str, Any]
    usage: Usage


class Error(Replying, tag="error", kw_only=True):
    error: dict[str, Any]


_encoder = msgspec.json.Encoder()


def encode(event: ServerEvent | OutputAudioDelta) -> str:
    return _encoder.encode(event).decode()


def error_event(error: RemoteProtocolError, event_id: str) -> Error:
    """OpenAI's ``error`` event for ``error`` (the SDK's ``ErrorEvent``)."""
    body = {
        "type": error.error_type,
        "code": error.code,
        "message": str(error),
        "param": error.param,
        "client_event_id": error.event_id,
    }
    client_event_id = error.event_id if isinstance(error.event_id, str) else None
    return Error(event_id=event_id, error=body, client_event_id=client_event_id)
