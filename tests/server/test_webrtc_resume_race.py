"""A WebRTC call's resume racing a socket's resume for the same token (issue 37: not yet attacked).

Attacked over the wire, the scripted model's server as in ``test_webrtc_resume.py``: a parked
session, then a resuming call offer and a resuming socket sent at once with the one token. One
of them takes the session, the other is refused by name, and the session then serves its winner
alone: never both, never neither, never a session left half attached. It held when attacked
(the loser, call or socket, is refused ``invalid_resume_token``); this test keeps it so.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from test_webrtc_resume import (
    KEPT,
    MANUAL,
    caller_of,
    close_clients,  # noqa: F401 - the fixture that closes every caller and socket
    open_socket,
    parked_socket_session,
    recv_until,
    resume_event,
    server,  # noqa: F401 - the fixture
)

from livegen.client.webrtc import Caller
from livegen.server.thread import ServerThread


async def call_outcome(caller: Caller, resume: dict[str, Any]) -> dict[str, Any]:
    """The call's answer to its resume: ``session.resumed``, or the error it was refused with."""
    try:
        await caller.take_back(resume)
    except Exception as exc:  # the offer itself refused: its HTTP answer's body is OpenAI's error
        return {"type": "error", "error": json.loads(str(exc))["error"]}
    return await caller.wait_for(lambda e: e["type"] in ("error", "session.resumed"), 20, "an answer")


async def socket_outcome(
    running: ServerThread, resume: dict[str, Any], after_s: float
) -> tuple[Any, dict[str, Any]]:
    await asyncio.sleep(after_s)
    ws = await open_socket(running, f"session_id={resume['session_id']}")
    await ws.send(json.dumps(resume))
    while True:
        event = json.loads(await asyncio.wait_for(ws.recv(), 20))
        if event["type"] in ("error", "session.resumed"):
            return ws, event


async def test_a_call_and_a_socket_racing_for_one_token_resume_it_once(server: ServerThread) -> None:  # noqa: F811
    winners = []
    # A race: run it a few times, each with a fresh parked session, the socket sent a little later
    # each time (a call's offer takes longer to reach the session than a socket's first message).
    for after_s in (0.0, 0.0, 0.02, 0.05, 0.1, 0.2):
        session_id, token, seen = await parked_socket_session(
            server,
            ({"type": "session.update", "session": MANUAL}, "session.updated"),
            ({"type": "conversation.item.create", "item": KEPT}, "conversation.item.done"),
        )
        resume = resume_event(session_id, token, seen)
        caller = caller_of(server)
        by_call, (ws, by_socket) = await asyncio.gather(
            call_outcome(caller, resume), socket_outcome(server, resume, after_s)
        )
        outcomes = sorted([by_call["type"], by_socket["type"]])
        assert outcomes == ["error", "session.resumed"], (by_call, by_socket)
        loser = by_call if by_socket["type"] == "session.resumed" else by_socket
        assert loser["error"]["code"] == "invalid_resume_token", loser  # refused by name
        winners.append("socket" if loser is by_call else "call")
        # The winner alone holds the session, and it serves it.
        if by_socket["type"] == "session.resumed":
            await ws.send(json.dumps({"type": "conversation.item.retrieve", "item_id": "item_kept"}))
            retrieved = await recv_until(ws, "conversation.item.retrieved", [])
        else:
            caller.send({"type": "conversation.item.retrieve", "item_id": "item_kept"})
            retrieved = await caller.event("conversation.item.retrieved", within=20)
        assert retrieved["item"]["content"][0]["text"] == "remember me"
        await caller.close()
        await ws.close()
    assert winners, winners  # (each of the two has won in practice, depending on the delay)
