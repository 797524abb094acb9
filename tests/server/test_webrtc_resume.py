"""A call whose connection is lost parks its session as a socket's; a WebSocket resume takes it back.

The server runs the scripted test model; the caller is aiortc (``livegen.client.webrtc``), the
resuming client a plain WebSocket, as a page that lost its call would open one.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import websockets

from livegen.client.webrtc import Caller
from livegen.server.thread import ServerThread
from voice.scripted import registry

MANUAL = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}
KEPT = {
    "type": "message",
    "id": "item_kept",
    "role": "user",
    "content": [{"type": "input_text", "text": "remember me"}],
}


def voice_service(server: ServerThread) -> Any:
    return next(s for s in server.app.state.livegen.services if s.name == "voice")


async def recv_until(ws: Any, kind: str, into: list[dict[str, Any]]) -> dict[str, Any]:
    while True:
        event = dict(json.loads(await asyncio.wait_for(ws.recv(), 20)))
        into.append(event)
        if event["type"] in (kind, "error"):
            return event


async def until_parked(server: ServerThread, session_id: str, within: float = 30.0) -> None:
    service = voice_service(server)
    deadline = time.monotonic() + within
    while service.calls.calls or session_id not in service.engine.parked:
        assert time.monotonic() < deadline, "the lost call's session did not park"
        await asyncio.sleep(0.1)


async def test_a_lost_call_parks_and_resumes_on_a_websocket(
    start_server: Callable[..., ServerThread],
) -> None:
    server = start_server(registry=registry(), voice_model="scripted-voice", world_model="none")
    server.wait_ready(timeout=30)
    caller = Caller(server.http_url, None)
    try:
        await caller.connect(session=MANUAL)
        created = await caller.event("session.created")
        session_id, token = created["session"]["id"], created["resume_token"]
        caller.send({"type": "conversation.item.create", "item": KEPT})
        await caller.wait_for(lambda e: e["type"] == "conversation.item.done", 15, "the item")
        seen = len(caller.events)  # every event so far is the session's (no answer has played)
    finally:
        await caller.close()  # the connection is lost: no hangup, no session.close
    await until_parked(server, session_id)
    url = f"{server.ws_url}/v1/realtime?session_id={session_id}"
    async with websockets.connect(url) as ws:
        resume = {"session_id": session_id, "resume_token": token, "last_event_seq": seen}
        await ws.send(json.dumps({"type": "session.resume", **resume}))
        events: list[dict[str, Any]] = []
        greeting = await recv_until(ws, "session.resumed", events)
        assert greeting["type"] == "session.resumed", greeting
        assert greeting["last_event_seq"] == greeting["latest_seq"] == seen  # nothing lost, nothing twice
        # The session is the call's (its conversation and manual turns), now on the socket...
        await ws.send(json.dumps({"type": "conversation.item.retrieve", "item_id": "item_kept"}))
        retrieved = await recv_until(ws, "conversation.item.retrieved", events)
        assert retrieved["item"]["content"][0]["text"] == "remember me", retrieved
        # ...whose answers' audio comes as events again, not on the call's (gone) track.
        await ws.send(json.dumps({"type": "response.create"}))
        await recv_until(ws, "response.done", events)
        assert any(e["type"] == "response.output_audio.delta" for e in events)
        assert session_id not in voice_service(server).engine.parked


async def test_a_hung_up_call_does_not_park(start_server: Callable[..., ServerThread]) -> None:
    server = start_server(registry=registry(), voice_model="scripted-voice", world_model="none")
    server.wait_ready(timeout=30)
    caller = Caller(server.http_url, None)
    try:
        await caller.connect()
        created = await caller.event("session.created")
        assert (await caller.hangup()).status_code == 200
        assert (await caller.event("session.closed", within=10))["reason"] == "hangup"
    finally:
        await caller.close()
    service = voice_service(server)
    deadline = time.monotonic() + 15
    while service.calls.calls or service.engine.runners:
        assert time.monotonic() < deadline, "the hung-up call was not freed"
        await asyncio.sleep(0.1)
    assert created["session"]["id"] not in service.engine.parked
