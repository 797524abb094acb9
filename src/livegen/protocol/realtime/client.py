"""The OpenAI Realtime client events: a fast, validating decoder, and the server-event encoder.

Client events decode in two steps: ``msgspec`` parses the JSON text into
builtins, then converts the object into the typed struct its ``type`` names.
Every failure becomes an ``InvalidRequest`` with OpenAI's error codes and the
client's ``event_id`` (when the text was at least an object with one), so the
endpoint can answer that client and carry on. Names are the GA ones; beta
spellings of input events map onto them (``BETA_ALIASES``).

``session.update``'s ``session`` decodes into typed structs whose fields may
be absent (``realtime/fields.py``); the session core applies them
(``voice/config.py``). ``item`` and ``response`` stay plain dicts: their
meaning belongs to the core, which validates them against the session's
state. Their types and ranges are checked here, though, so that no wrong type
reaches the core; JSON nested deeper than the parser takes is ``invalid_json``, never
a ``RecursionError``; and a binary message is ``invalid_event``
(``decode_message``).

Server events are plain dicts built by the core; ``encode`` serialises them.
"""

from __future__ import annotations

import binascii
from collections.abc import Mapping
from typing import Any, ClassVar

import msgspec
import pybase64

from livegen.protocol import errors as wire_errors
from livegen.protocol.realtime.fields import Count, SessionShape, check_nested, decode_session, explain


class ClientEvent(msgspec.Struct, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = ""
    event_id: str | None = None


class SessionUpdate(ClientEvent, frozen=True, kw_only=True):
    TYPE = "session.update"
    session: SessionShape


class AudioAppend(ClientEvent, frozen=True, kw_only=True):
    TYPE = "input_audio_buffer.append"
    audio: str

    def audio_bytes(self) -> bytes:
        """The appended bytes; refuses text that is not strict base64.

        ``pybase64`` (SIMD) decodes first: the standard library's decoder took about 6 us of
        every 20 ms append, some 8% of the server's CPU at 200 streaming sessions. It accepts
        a subset of what ``binascii``'s strict mode accepts, with the same bytes (it refuses
        padding past a whole quantum, which strict mode ignores), so whatever it refuses goes
        to ``binascii``, whose verdict and message are the wire's.
        """
        try:
            return pybase64.b64decode(self.audio, validate=True)
        except (binascii.Error, ValueError):
            pass
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
    content_index: Count = 0
    audio_end_ms: Count


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
    played_ms: Count


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
    last_event_seq: Count = 0


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


def session_update(session: dict[str, Any], event_id: str | None = None) -> SessionUpdate:
    """A ``session.update`` of ``session`` (a dict, as a client would send it), decoded and checked."""
    return SessionUpdate(session=decode_session(session, event_id), event_id=event_id)


def supported() -> str:
    """The event types taken, as OpenAI lists them: 'a', 'b', and 'c'."""
    names = [f"'{name}'" for name in EVENT_TYPES]
    return ", ".join(names[:-1]) + f", and {names[-1]}"


_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


def decode_message(message: Mapping[str, Any]) -> ClientEvent:
    """One client event from one ASGI ``websocket.receive`` message: a binary message (where
    the protocol has only text) is a typed error like any other bad input, never a ``KeyError``."""
    return decode(text_of(message))


#: Why a binary message is refused: the Realtime protocol is JSON text only.
BINARY_DETAIL = "binary messages are not part of this protocol; send JSON text"


def text_of(message: Mapping[str, Any], refusal: wire_errors.WireError = wire_errors.INVALID_EVENT) -> str:
    """The text of one ASGI ``websocket.receive`` message; a binary one raises ``refusal``."""
    text = message.get("text")
    if text is None:
        raise refusal.error(detail=BINARY_DETAIL)
    return str(text)


def decode(data: str | bytes) -> ClientEvent:
    """One client event from one WebSocket text message."""
    try:
        raw = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise wire_errors.INVALID_JSON.error(detail=exc) from None
    except RecursionError:
        # msgspec stops at the interpreter's recursion limit; a client must not be able to
        # turn that into an exception of ours.
        raise wire_errors.INVALID_JSON.error(detail="it nests arrays or objects too deeply") from None
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
    if cls is SessionUpdate and isinstance(raw.get("session"), dict) and "event_id" in raw:
        # The session's fields decode in the same pass: a bad event_id is still the error named.
        raw = {"event_id": raw.pop("event_id"), **raw}
    try:
        event = msgspec.convert(raw, cls)
    except msgspec.ValidationError as exc:
        raise explain(exc, "", event_id) from None
    for field in ("item", "response"):
        value = getattr(event, field, None)
        if value is not None:
            check_nested(field, value, event_id)
    return event


def encode(event: msgspec.Struct | dict[str, Any]) -> bytes:
    """One event (a typed server event, or an endpoint's own dict) as JSON bytes."""
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
    "decode_message",
    "encode",
    "session_update",
    "text_of",
]
