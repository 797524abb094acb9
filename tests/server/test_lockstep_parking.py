"""Dropped clients of a lockstep model never lock new ones out (issue 37, item 5), and a lockstep
session refuses turn detection by name (item 15).

A real server of ``moshi-two`` (``moshi-tiny``'s stock classes with two slots:
``cluster_lockstep_models.py``), its step-time admission off (``duplex_realtime_headroom=0``) so
that only the slots admit. Clients drop without a close, as a network drop does: their sessions
park, each holding its seat at the frame clock, until a new session needs one
(``runtime/voice/parking.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import websockets
from cluster_lockstep_models import NAME, registry

from livegen.server.thread import ServerThread

pytest.importorskip("torch")
pytest.importorskip("transformers")

SLOTS = 2


@pytest.fixture
def lockstep_server(start_server: Callable[..., ServerThread]) -> ServerThread:
    server = start_server(
        registry=registry(), voice_model=NAME, world_model="none", duplex_realtime_headroom=0.0
    )
    server.wait_ready(timeout=180)
    return server


@pytest.fixture
async def sockets() -> AsyncIterator[list[Any]]:
    opened: list[Any] = []
    yield opened
    for ws in opened:
        with contextlib.suppress(Exception):
            await ws.close()


async def first_event(
    server: ServerThread, opened: list[Any], query: str = f"model={NAME}"
) -> dict[str, Any]:
    """A socket's first event that is not a log of its model's frames."""
    ws = await websockets.connect(f"{server.ws_url}/v1/realtime?{query}")
    opened.append(ws)
    return dict(json.loads(await asyncio.wait_for(ws.recv(), 30)))


def parked(server: ServerThread) -> int:
    import httpx

    voice = httpx.get(f"{server.http_url}/health", timeout=10).json()["services"]["voice"]
    return int(voice.get("parked_sessions", 0))


async def until_parked(server: ServerThread, count: int) -> None:
    async with asyncio.timeout(20):
        while await asyncio.to_thread(parked, server) != count:  # noqa: ASYNC110 - polling a server
            await asyncio.sleep(0.1)


async def test_sessions_whose_clients_dropped_give_their_seats_to_new_ones(
    lockstep_server: ServerThread, sockets: list[Any]
) -> None:
    """Before: every slot held by a parked session, each new one was refused ``realtime_capacity``
    for the whole resume grace (30 s)."""
    created = [await first_event(lockstep_server, sockets) for _ in range(SLOTS)]
    assert [e["type"] for e in created] == ["session.created"] * SLOTS
    refused = await first_event(lockstep_server, sockets)  # live sessions hold every seat
    assert refused["type"] == "error" and refused["error"]["code"] == "realtime_capacity"
    for ws in sockets[:SLOTS]:
        ws.transport.abort()  # no close frame: the sessions park
    await until_parked(lockstep_server, SLOTS)
    # Each new session takes the seat of the oldest parked one, at once, not after the grace.
    fresh = [await first_event(lockstep_server, sockets) for _ in range(SLOTS)]
    assert [e["type"] for e in fresh] == ["session.created"] * SLOTS, fresh
    assert await asyncio.to_thread(parked, lockstep_server) == 0
    # A session whose seat was taken is gone: its resume finds nothing; live seats are never taken.
    oldest = created[0]
    query = f"session_id={oldest['session']['id']}"
    ws = await websockets.connect(f"{lockstep_server.ws_url}/v1/realtime?{query}")
    sockets.append(ws)
    resume = {"type": "session.resume", "session_id": oldest["session"]["id"]}
    await ws.send(json.dumps({**resume, "resume_token": oldest["resume_token"], "last_event_seq": 1}))
    answer = json.loads(await asyncio.wait_for(ws.recv(), 30))
    assert answer["type"] == "error" and answer["error"]["code"] == "session_not_found", answer
    full = await first_event(lockstep_server, sockets)
    assert full["type"] == "error" and full["error"]["code"] == "realtime_capacity"


async def test_a_lockstep_session_refuses_server_vad_by_name(
    lockstep_server: ServerThread, sockets: list[Any]
) -> None:
    """Before: ``turn_detection: server_vad`` was taken (``session.updated``), though the model
    takes its turns itself."""
    assert (await first_event(lockstep_server, sockets))["type"] == "session.created"
    ws = sockets[0]
    update = {"type": "realtime", "audio": {"input": {"turn_detection": {"type": "server_vad"}}}}
    await ws.send(json.dumps({"type": "session.update", "session": update}))
    while (event := json.loads(await asyncio.wait_for(ws.recv(), 30)))["type"] != "error":
        assert event["type"] != "session.updated", event
    assert (event["error"]["code"], event["error"]["param"]) == (
        "unsupported_parameter",
        "session.audio.input.turn_detection",
    )
    assert "'session.audio.input.turn_detection'" in event["error"]["message"]
