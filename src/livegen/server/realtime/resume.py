"""``session.resume``: reading a resuming connection's first event, or a resuming call's.

A resuming connection (``/v1/realtime?session_id=``) must open with a
``session.resume`` for that session, in time; a resuming call
(``/v1/realtime/calls?session_id=``) carries the same event in its offer's
``resume`` part. This module checks that much.
The engine does the rest (``runtime/voice/engine.py``, ``VoiceEngine.hand_over``):
it claims the single-use token and hands the connection to the session's owner.
"""

from __future__ import annotations

import asyncio

from starlette.websockets import WebSocket, WebSocketDisconnect

from livegen.errors import InvalidRequest
from livegen.protocol import errors as wire_errors
from livegen.protocol import realtime as wire

#: How long a resuming connection may take to send its ``session.resume``.
FIRST_EVENT_TIMEOUT_S = 10.0


async def read_resume(websocket: WebSocket, session_id: str) -> wire.SessionResume:
    """The resuming connection's first event, which must be a ``session.resume`` for ``session_id``."""
    return checked_resume(await first_text(websocket, wire_errors.INVALID_RESUME), session_id)


def checked_resume(text: str, session_id: str) -> wire.SessionResume:
    """``text`` as a ``session.resume`` for ``session_id`` (a socket's first event, a call's
    ``resume`` part); raises ``invalid_resume`` (or the decoding error) if it is not one."""
    event = wire.decode(text)
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
        async with asyncio.timeout(FIRST_EVENT_TIMEOUT_S):
            message = await websocket.receive()
    except TimeoutError:
        raise refusal.error(detail=f"no first event within {FIRST_EVENT_TIMEOUT_S:.0f} s") from None
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(int(message.get("code", 1006)))
    return wire.text_of(message, refusal)
