"""The world wire protocol (``/v1/worlds``, docs/world-protocol.md): typed events and their codec.

JSON text messages both ways, plus one binary message per frame after each
``world.chunk``. Events are msgspec structs tagged by ``type``, so one decode
call parses and validates a message (types, ranges, booleans refused where an
integer is due) without building an intermediate dict; measured by
``livegen bench world-session``. Anything that does not decode becomes an
``InvalidRequest`` with a code the client can act on, carrying the client's
``event_id`` when the message had one: ``invalid_json``, ``unknown_event_type``,
``invalid_request``, ``message_too_large`` (JSON nested too deeply for the parser is
``invalid_json``).

Pure: bytes in, events out, and back. Session rules (duplicates, floors,
controls a model understands) belong to ``world/``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from livegen.errors import InvalidRequest

#: Largest client message; frames only flow to the client, so events stay small.
MAX_MESSAGE_BYTES = 64 * 1024

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Pacing = Literal["realtime", "asap"]
FrameFormat = Literal["jpeg", "png", "rgb24"]


class OutputConfig(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=False):
    format: FrameFormat = "jpeg"
    quality: Annotated[int, msgspec.Meta(ge=1, le=100)] = 85


class SessionConfig(msgspec.Struct, forbid_unknown_fields=True):
    """The fields a client may set; None leaves the current value."""

    model: str | None = None
    prompt: Annotated[str, msgspec.Meta(max_length=4096)] | None = None
    seed: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None = None
    pacing: Pacing | None = None
    output: OutputConfig | None = None
    max_pending_events: Annotated[int, msgspec.Meta(ge=1, le=1024)] | None = None
    max_chunks_ahead: Annotated[int, msgspec.Meta(ge=1, le=256)] | None = None
    #: Frames a chunk, at creation only: the model's nearest length is used (``session.created``).
    frames_per_chunk: Annotated[int, msgspec.Meta(ge=1, le=256)] | None = None
    #: The first frame, PNG or JPEG in base64, at creation only (``world/images.py`` checks it).
    seed_image: str | None = None
    #: Record the session (video and events log) in ``--world-recordings``; at creation only.
    recording: bool | None = None


# -- client to server ------------------------------------------------------------------------
class SessionUpdate(msgspec.Struct, tag="session.update", tag_field="type", forbid_unknown_fields=True):
    session: SessionConfig = msgspec.field(default_factory=SessionConfig)


class Control(msgspec.Struct, forbid_unknown_fields=True):
    track: str
    schema: str
    data: Any


class WorldEvent(msgspec.Struct, tag="world.event", tag_field="type", forbid_unknown_fields=True):
    event_id: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
    prompt: Annotated[str, msgspec.Meta(max_length=4096)] | None = None
    controls: list[Control] | None = None
    #: Blend the new prompt in over this many chunks (0 or 1: at once); checked by ``world.Event``.
    transition_chunks: int | None = None


class ChunkAck(msgspec.Struct, tag="chunk.ack", tag_field="type", forbid_unknown_fields=True):
    chunk_index: NonNegative
    #: When the client sent it: the chunk's first frame shown (``start``) or its last (``end``).
    at: Literal["start", "end"] = "end"


class WorldReset(msgspec.Struct, tag="world.reset", tag_field="type", forbid_unknown_fields=True):
    pass


class SessionClose(msgspec.Struct, tag="session.close", tag_field="type", forbid_unknown_fields=True):
    pass


class SpectateToken(
    msgspec.Struct, tag="session.spectate_token", tag_field="type", forbid_unknown_fields=True
):
    """Ask for a token that lets spectators join (``/v1/worlds?spectate=ID&token=T``); a new one
    replaces the last."""


class PlayerToken(msgspec.Struct, tag="session.player_token", tag_field="type", forbid_unknown_fields=True):
    """Ask for a token that lets another player join and steer its own tracks
    (``/v1/worlds?join=ID&token=T``); a new one replaces the last."""


ClientEvent = SessionUpdate | WorldEvent | ChunkAck | WorldReset | SessionClose | SpectateToken | PlayerToken
CLIENT_TYPES = frozenset(
    {
        "session.update",
        "world.event",
        "chunk.ack",
        "world.reset",
        "session.close",
        "session.spectate_token",
        "session.player_token",
    }
)


# -- server to client ------------------------------------------------------------------------
class TrackObject(msgspec.Struct):
    """One control track of a session object: what a ``world.event`` control may carry."""

    track: str
    schema: str
    json_schema: dict[str, Any]
    default: Any
    is_sticky: bool
    description: str


#: How a world session's frames and events may travel: the WebSocket of ``/v1/worlds`` (WebRTC
#: calls join the list where the server offers them).
Transport = Literal["websocket", "webrtc"]


class WorldCapabilities(msgspec.Struct):
    """``session.capabilities``: what this session can do here, in one block a client reads first
    (as the voice session's ``capabilities``). The model's side (controls, frame rate, chunk
    length) and the server's (recordings, spectators, transports) as they apply to this session."""

    #: The control tracks a ``world.event`` of the owner may carry (``controls`` describes each; in a
    #: shared world the other players' tracks are theirs, ``player.joined`` names them).
    controls: list[str]
    fps: float
    #: Frames of each chunk after the first, and of chunk 0.
    frames_per_chunk: int
    first_chunk_frames: int
    #: Whether the server records sessions (``session.update`` ``recording``), and whether
    #: spectators may join; both false where the server has none configured.
    recording: bool
    spectators: bool
    transports: list[Transport]
    #: How many players the model takes (``session.player_token``); 1: the owner alone.
    players: int = 1


class SessionObject(msgspec.Struct):
    """The session of ``session.created`` and ``session.updated``: what the client asked for,
    as the server applied it, and the model's shape (docs/world-protocol.md). The server
    builds this; the events carry it as a plain object, so a client reads it by key."""

    id: str
    model: str
    prompt: str
    seed: int
    seed_image: bool
    pacing: str
    output: OutputConfig
    max_pending_events: int
    max_chunks_ahead: int
    width: int
    height: int
    fps: float
    frames_per_chunk: int
    first_chunk_frames: int
    controls: list[TrackObject]
    capabilities: WorldCapabilities


class SessionCreated(msgspec.Struct, tag="session.created", tag_field="type"):
    session: dict[str, Any]


class SessionUpdated(msgspec.Struct, tag="session.updated", tag_field="type"):
    session: dict[str, Any]


class EventAccepted(msgspec.Struct, tag="world.event.accepted", tag_field="type"):
    event_id: int
    status: Literal["accepted", "duplicate"]
    pending_event_count: int


class Timings(msgspec.Struct):
    queue_ms: float
    model_ms: float
    encode_ms: float


class AppliedEvent(msgspec.Struct):
    """An event a chunk applied, and the player who sent it (each player numbers its own)."""

    player: int
    event_id: int


class ChunkHeader(msgspec.Struct, tag="world.chunk", tag_field="type"):
    chunk_index: int
    request_id: str
    #: The owner's (player 1's) applied ids; ``applied_events`` names every player's.
    applied_event_ids: list[int]
    num_frames: int
    width: int
    height: int
    format: FrameFormat
    media_time_ms: float
    timings: Timings
    #: This chunk's step of a prompt transition: {event_id, step, chunks, weight, last_chunk_index}.
    prompt_transition: dict[str, Any] | None = None
    #: Every event the chunk applied, with its player, in order.
    applied_events: list[AppliedEvent] = msgspec.field(default_factory=list)


class ResetDone(msgspec.Struct, tag="world.reset.done", tag_field="type"):
    pass


class SessionClosed(msgspec.Struct, tag="session.closed", tag_field="type"):
    pass


class RecordingStarted(msgspec.Struct, tag="recording.started", tag_field="type"):
    """The session is being recorded: fetch it at ``/v1/worlds/recordings/{recording_id}``."""

    recording_id: str
    video_format: str


class RecordingFailed(msgspec.Struct, tag="recording.failed", tag_field="type"):
    """The recording ended early (a disk that fills, a writer that cannot keep up); the session goes on."""

    recording_id: str
    code: str
    message: str


class SpectateTokenCreated(msgspec.Struct, tag="session.spectate_token.created", tag_field="type"):
    """The answer to ``session.spectate_token``: who holds ``token`` may watch until ``expires_at``."""

    session_id: str
    token: str
    #: Unix time, seconds: joins after it are refused (spectators already in stay).
    expires_at: float
    #: The path (and query) a spectator opens.
    url: str


class PlayerTokenCreated(msgspec.Struct, tag="session.player_token.created", tag_field="type"):
    """The answer to ``session.player_token``: who holds ``token`` may join as a player until
    ``expires_at``, while a seat is free."""

    session_id: str
    token: str
    expires_at: float
    #: The join URL: the path (and query) the joining player's WebSocket opens.
    url: str


class PlayerJoined(msgspec.Struct, tag="player.joined", tag_field="type"):
    """A joining player's first event: the session, its player number and the tracks it steers."""

    session: dict[str, Any]
    player: int
    tracks: list[str]


class SpectateStarted(msgspec.Struct, tag="spectate.started", tag_field="type"):
    """A spectator's first event: the session it watches; chunks follow from the next one."""

    session: dict[str, Any]


class ErrorBody(msgspec.Struct):
    type: str
    code: str
    message: str
    param: str | None = None
    event_id: int | str | None = None


class Error(msgspec.Struct, tag="error", tag_field="type"):
    error: ErrorBody


ServerEvent = (
    SessionCreated
    | SessionUpdated
    | EventAccepted
    | ChunkHeader
    | ResetDone
    | SessionClosed
    | Error
    | RecordingStarted
    | RecordingFailed
    | SpectateTokenCreated
    | SpectateStarted
    | PlayerTokenCreated
    | PlayerJoined
)

_client_decoder = msgspec.json.Decoder(ClientEvent)
_server_decoder = msgspec.json.Decoder(ServerEvent)
_encoder = msgspec.json.Encoder()


class _Probe(msgspec.Struct):
    """What can be salvaged from an event that failed to decode, for the error."""

    type: Any = None
    event_id: Any = None


_probe_decoder = msgspec.json.Decoder(_Probe)


def decode_client(raw: bytes | str) -> ClientEvent:
    """One client event, validated; raises ``InvalidRequest`` with a code and the client's event id."""
    if len(raw) > MAX_MESSAGE_BYTES:
        raise InvalidRequest(
            f"message of {len(raw)} bytes exceeds the limit of {MAX_MESSAGE_BYTES}", code="message_too_large"
        )
    try:
        return _client_decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise _explain(raw, exc) from None
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"message is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:
        # msgspec stops at the interpreter's recursion limit (skipping an unknown field's value
        # recurses too); a client must not be able to turn that into an exception of ours.
        raise InvalidRequest(
            "message is not valid JSON: it nests arrays or objects too deeply", code="invalid_json"
        ) from None


def _explain(raw: bytes | str, exc: msgspec.ValidationError) -> InvalidRequest:
    try:
        probe = _probe_decoder.decode(raw)
    except RecursionError:
        return InvalidRequest("message nests arrays or objects too deeply", code="invalid_json")
    except msgspec.DecodeError:
        return InvalidRequest(f"a client event must be a JSON object: {exc}", code="invalid_request")
    event_id = probe.event_id if _is_event_id(probe.event_id) else None
    if not isinstance(probe.type, str):
        return InvalidRequest("a client event needs a string 'type'", code="invalid_request", param="type")
    if probe.type not in CLIENT_TYPES:
        known = ", ".join(sorted(CLIENT_TYPES))
        return InvalidRequest(
            f"unknown event type {probe.type!r}; expected one of {known}",
            code="unknown_event_type",
            param="type",
            event_id=event_id,
        )
    param = str(exc).rpartition("at `$.")[2].rstrip("`") or None
    code = "invalid_event" if probe.type == "world.event" else "invalid_request"
    return InvalidRequest(f"invalid {probe.type}: {exc}", code=code, param=param, event_id=event_id)


def _is_event_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def encode(event: ServerEvent | ClientEvent) -> bytes:
    return _encoder.encode(event)


def decode_server(raw: bytes | str) -> ServerEvent:
    """One server event (for clients)."""
    return _server_decoder.decode(raw)


def error_event(error: InvalidRequest | Any) -> Error:
    """The ``error`` event for a ``ProtocolError``."""
    body = error.to_error_body()
    return Error(ErrorBody(**body))
