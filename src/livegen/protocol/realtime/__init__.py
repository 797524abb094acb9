"""The OpenAI Realtime wire, typed: one module per concept, as ``protocol/world.py`` types the world's.

- ``client.py``: client events (msgspec structs) and their validating decoder;
- ``fields.py``: the typed shape of the objects nested in client events, and OpenAI's errors for them;
- ``beta.py``: the beta dialect, for clients written against the beta API.

``from livegen.protocol import realtime as wire`` gives the client events and the codec.
"""

from livegen.protocol.realtime.client import (
    BETA_ALIASES,
    BINARY_DETAIL,
    EVENT_TYPES,
    TRANSCRIPTION_SESSION_UPDATE,
    AudioAppend,
    AudioClear,
    AudioCommit,
    ClientEvent,
    ItemCreate,
    ItemDelete,
    ItemRetrieve,
    ItemTruncate,
    OutputAudioClear,
    PlaybackAck,
    ResponseCancel,
    ResponseCreate,
    SessionClose,
    SessionResume,
    SessionUpdate,
    decode,
    decode_message,
    encode,
    encode_client,
    session_update,
    supported,
    text_of,
)

__all__ = [
    "BETA_ALIASES",
    "BINARY_DETAIL",
    "EVENT_TYPES",
    "TRANSCRIPTION_SESSION_UPDATE",
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
    "SessionResume",
    "SessionUpdate",
    "decode",
    "decode_message",
    "encode",
    "encode_client",
    "session_update",
    "supported",
    "text_of",
]
