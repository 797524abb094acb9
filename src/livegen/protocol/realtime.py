"""The OpenAI Realtime client events: a fast, validating decoder, and the server-event encoder.

Client events decode in two steps: ``msgspec`` parses the JSON text into
builtins, then converts the object into the typed struct its ``type`` names.
Every failure becomes an ``InvalidRequest`` with OpenAI's error codes and the
client's ``event_id`` (when the text was at least an object with one), so the
endpoint can answer that client and carry on. Names are the GA ones; beta
spellings of input events map onto them (``BETA_ALIASES``).

Nested configuration objects (``session``, ``item``, ``response``) stay plain
dicts here: their meaning belongs to the session core (``voice/config.py``),
which validates them against the session's state.

Server events are plain dicts built by the core; ``encode`` serialises them.
"""

from __future__ import annotations

import binascii
from typing import Any, ClassVar

import msgspec

from livegen.protocol import errors as wire_errors


class ClientEvent(msgspec.Struct, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = ""
    event_id: str | None = None


class SessionUpdate(ClientEvent, frozen=True, kw_only=True):
    TYPE = "session.update"
    session: dict[str, Any]


class AudioAppend(ClientEvent, frozen=True, kw_only=True):
    TYPE = "input_audio_buffer.append"
    audio: str

    def audio_bytes(self) -> bytes:
        """The appended bytes; refuses text that is not strict base64."""
        try:
            return binascii.a2b_base64(self.audio, strict_mode=True)
        except (binascii.Error, ValueError) as exc:
            detail = f"audio is not valid base64: {exc}"
            raise wire_errors.INVALID_BASE64.error(detail=detail, event_id=self.event_id) from None


class AudioCommit(ClientEvent, frozen=True, kw_only=True):
    TYPE = "input_audio_buffer.commit"


class AudioClear(ClientEvent, frozen=True, kw_only=True):
    TYPE = "input_audio_buffer.clear"


class ItemCreate(ClientEvent, frozen=True, kw_only=True):
    TYPE = "conversation.item.create"
    item: dict[str, Any]
    previous_item_id: str | None = None


class ItemRetrieve(ClientEvent, frozen=True, kw_only=True):
    TYPE = "conversation.item.retrieve"
    item_id: str


class ItemDelete(ClientEvent, frozen=True, kw_only=True):
    TYPE = "conversation.item.delete"
    item_id: str


class ItemTruncate(ClientEvent, frozen=True, kw_only=True):
    TYPE = "conversation.item.truncate"
    item_id: str
    content_index: int = 0
    audio_end_ms: int


class ResponseCreate(ClientEvent, frozen=True, kw_only=True):
    TYPE = "response.create"
    response: dict[str, Any] | None = None


class ResponseCancel(ClientEvent, frozen=True, kw_only=True):
    TYPE = "response.cancel"
    response_id: str | None = None


class OutputAudioClear(ClientEvent, frozen=True, kw_only=True):
    TYPE = "output_audio_buffer.clear"


class PlaybackAck(ClientEvent, frozen=True, kw_only=True):
    """Extension: the client has played ``played_ms`` of response ``response_id``'s audio."""

    TYPE = "playback.ack"
    response_id: str | None = None
    item_id: str | None = None
    played_ms: int


class SessionClose(ClientEvent, frozen=True, kw_only=True):
    """Extension: end the session; answered by ``session.closed``, the terminal event."""

    TYPE = "session.close"


class SessionResume(ClientEvent, frozen=True, kw_only=True):
    """Extension: re-attach to a session whose socket was lost; the first event of a connection
    opened with ``/v1/realtime?session_id=<id>``. ``last_event_seq`` is the 1-based position of the
    last server event the client received (0: none)."""

    TYPE = "session.resume"
    session_id: str
    resume_token: str
    last_event_seq: int = 0


EVENT_TYPES: dict[str, type[ClientEvent]] = {
    cls.TYPE: cls
    for cls in (
        SessionUpdate,
        AudioAppend,
        AudioCommit,
        AudioClear,
        ItemCreate,
        ItemRetrieve,
        ItemDelete,
        ItemTruncate,
        ResponseCreate,
        ResponseCancel,
        OutputAudioClear,
        PlaybackAck,
        SessionClose,
        SessionResume,
    )
}

#: Beta and vendor spellings accepted on input.
BETA_ALIASES: dict[str, str] = {
    "input.commit": "input_audio_buffer.commit",
    "input.cancel": "input_audio_buffer.clear",
}


#: Beta's update of a transcription session: a ``session.update`` of ``type: transcription``.
TRANSCRIPTION_SESSION_UPDATE = "transcription_session.update"


def _as_session_update(raw: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    session = raw.get("session", {})
    if isinstance(session, dict):
        raw = {**raw, "session": {**session, "type": "transcription"}}
    return SessionUpdate.TYPE, raw


def supported() -> str:
    """The event types taken, as OpenAI lists them: 'a', 'b', and 'c'."""
    names = [f"'{name}'" for name in EVENT_TYPES]
    return ", ".join(names[:-1]) + f", and {names[-1]}"


_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


def decode(data: str | bytes) -> ClientEvent:
    """One client event from one WebSocket text message."""
    try:
        raw = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise wire_errors.INVALID_JSON.error(detail=exc) from None
    if not isinstance(raw, dict):
        raise wire_errors.INVALID_EVENT.error(detail="an event must be a JSON object with a 'type'")
    event_id = raw.get("event_id")
    if not isinstance(event_id, str):
        event_id = None
    kind = raw.get("type")
    if not isinstance(kind, str):
        raise wire_errors.INVALID_EVENT.error(
            detail="the event has no 'type'", param="type", event_id=event_id
        )
    if kind == TRANSCRIPTION_SESSION_UPDATE:
        kind, raw = _as_session_update(raw)
    cls = EVENT_TYPES.get(BETA_ALIASES.get(kind, kind))
    if cls is None:
        raise wire_errors.UNKNOWN_EVENT_TYPE.error(event_type=kind, supported=supported(), event_id=event_id)
    raw.pop("type")
    try:
        return msgspec.convert(raw, cls)
    except msgspec.ValidationError as exc:
        param = _param_of(exc)
        if param is not None and str(exc).startswith("Object missing required field"):
            missing = wire_errors.MISSING_REQUIRED_PARAMETER
            raise missing.error(name=param, param=param, event_id=event_id) from None
        detail = f"invalid {cls.TYPE} event: {exc}"
        raise wire_errors.INVALID_VALUE.error(detail=detail, param=param, event_id=event_id) from None


def _param_of(exc: msgspec.ValidationError) -> str | None:
    message = str(exc)
    marker = "`$."
    if marker in message:
        return message.split(marker, 1)[1].split("`", 1)[0]
    if "missing required field" in message:
        return message.rsplit("`", 2)[-2] if message.count("`") >= 2 else None
    return None


def encode(event: dict[str, Any]) -> bytes:
    """One server event as JSON bytes (sent as a text message)."""
    return _encoder.encode(event)


def encode_client(event: dict[str, Any]) -> bytes:
    """A client event as JSON (for clients and tests)."""
    return _encoder.encode(event)


__all__ = [
    "EVENT_TYPES",
    "AudioAppend",
    "AudioClear",
    "AudioCommit",
    "ClientEvent",
    "ItemCreate",
    "ItemDelete",
    "ItemRetrieve",
    "ItemTruncate",
    "OutputAudioClear",
    "PlaybackAck",
    "ResponseCancel",
    "ResponseCreate",
    "SessionClose",
    "SessionUpdate",
    "decode",
    "encode",
]
