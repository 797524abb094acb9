"""``session.resume``: handing a live voice session to the client's new socket.

The coroutine that opened a session owns it to the end (``RealtimeService._serve``):
it alone attaches and detaches sockets, so there is no race between a resume
and the session ending. A resuming connection (``/v1/realtime?session_id=``)
only checks the request and posts a ``Handoff`` to the owner's queue, then
keeps its socket open until the owner is done with it (an ASGI handler that
returns closes its socket). The owner takes a handoff whether its old socket
is gone (the usual case, within the grace period) or still looks open (a
half-open connection: the old socket is closed, the new one wins).

Tokens are random, compared in constant time, single-use (a resume claims the
token before it posts its handoff: of two concurrent resumes with one token,
one wins) and rotated on every resume, so a token that leaked from an old
connection cannot take the session again (``runtime.attachment.ResumeCredential``).
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field

from starlette.websockets import WebSocket, WebSocketDisconnect

from livegen.errors import InvalidRequest
from livegen.protocol import errors as wire_errors
from livegen.protocol import realtime as wire
from livegen.protocol.duplex import DuplexDialect
from livegen.runtime.voice.attachment import Attachment, ResumeCredential
from livegen.runtime.voice.runner import Runner

#: How long a resuming connection may take to send its ``session.resume``.
FIRST_EVENT_TIMEOUT_S = 10.0


@dataclass
class Handoff:
    """A resuming client's socket, posted to the session's owner."""

    websocket: WebSocket
    last_seq: int
    event_id: str | None
    #: A duplex client (``protocol/duplex.py``): its greeting and refusals are vllm-omni's.
    duplex: bool = False
    #: Set by the owner when it is done with the socket (the resuming handler may then return).
    released: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class Resumable:
    """What a live voice session exposes to resuming connections."""

    runner: Runner
    attachment: Attachment
    credential: ResumeCredential = field(default_factory=ResumeCredential)
    handoffs: asyncio.Queue[Handoff] = field(default_factory=asyncio.Queue)
    #: The duplex dialect's state when the session was opened by a duplex client (a resume keeps it).
    duplex: DuplexDialect | None = None
    #: Set to end a parked session early (the parked budget needs its room).
    evicted: asyncio.Event = field(default_factory=asyncio.Event)

    def held_bytes(self) -> int:
        """What the session holds while parked: its journal and its history (text)."""
        return self.attachment.journal_bytes + self.runner.session.conversation.chars()


async def read_resume(websocket: WebSocket, session_id: str) -> wire.SessionResume:
    """The resuming connection's first event, which must be a ``session.resume`` for ``session_id``."""
    event = wire.decode(await first_text(websocket, wire_errors.INVALID_RESUME))
    if not isinstance(event, wire.SessionResume):
        raise InvalidRequest(
            f"a connection with ?session_id= must begin with session.resume, not {event.TYPE}",
            code="invalid_resume",
            event_id=event.event_id,
        )
    if event.session_id != session_id:
        raise InvalidRequest(
            "session.resume names another session than ?session_id=",
            code="invalid_resume",
            param="session_id",
            event_id=event.event_id,
        )
    return event


async def first_text(websocket: WebSocket, refusal: wire_errors.WireError) -> str:
    """The first message of a connection, which must be text in time; else ``refusal`` is raised
    (``WebSocketDisconnect`` when the client left first)."""
    try:
        message = await asyncio.wait_for(websocket.receive(), FIRST_EVENT_TIMEOUT_S)
    except TimeoutError:
        raise refusal.error(detail=f"no first event within {FIRST_EVENT_TIMEOUT_S:.0f} s") from None
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(int(message.get("code", 1006)))
    return wire.text_of(message, refusal)


def resumed_event(session_id: str, token: str, last_seq: int, seq: int) -> str:
    """The greeting on the new socket, before the replay (not itself numbered in the stream)."""
    return wire.encode(
        {
            "type": "session.resumed",
            "event_id": "event_resumed_" + secrets.token_hex(4),
            "session_id": session_id,
            "resume_token": token,
            "last_event_seq": last_seq,
            "replay_from_seq": last_seq + 1,
            "latest_seq": seq,
        }
    ).decode()
