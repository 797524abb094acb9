"""Churn and faults, bounded: many sessions opened, used briefly, dropped or closed; nothing left.

The CI part of the churn suite (the long run is ``livegen bench churn``):
voice and world sessions against the real server, each used for a moment,
then closed cleanly, dropped without a close frame, or left silent; after
all of them, descriptors, session gauges, live and parked sessions and KV
pages are back to where they started, and the log holds no traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
from collections.abc import Callable

import httpx
import pytest
import websockets

from livegen.server.thread import ServerThread

StartServer = Callable[..., ServerThread]
NUM_VOICE, NUM_WORLD, AT_ONCE = 300, 100, 16


def num_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def voice_session(url: str, how: str) -> None:
    async with websockets.connect(url + "/v1/realtime") as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"
        await ws.send(json.dumps({"type": "conversation.item.create", "item": _text_item("hello")}))
        await ws.send(json.dumps({"type": "response.create", "response": {"output_modalities": ["text"]}}))
        await ws.recv()
        await _leave(ws, how)


async def world_session(url: str, how: str) -> None:
    async with websockets.connect(url + "/v1/worlds") as ws:
        await ws.send(json.dumps({"type": "session.update", "session": {"pacing": "asap"}}))
        assert json.loads(await ws.recv())["type"] == "session.created"
        await ws.recv()
        await _leave(ws, how)


def _text_item(text: str) -> dict[str, object]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


async def _leave(ws: websockets.ClientConnection, how: str) -> None:
    if how == "drop":  # no close frame: the server sees a lost connection
        ws.transport.abort()
    elif how == "close_event":
        await ws.send(json.dumps({"type": "session.close"}))
    # "close": the context manager's close frame


async def churn(url: str, num_voice: int, num_world: int) -> None:
    rng = random.Random(18)
    jobs = [("voice", i) for i in range(num_voice)] + [("world", i) for i in range(num_world)]
    rng.shuffle(jobs)
    gate = asyncio.Semaphore(AT_ONCE)

    async def one(kind: str) -> None:
        how = rng.choice(["drop", "close", "close_event"])
        async with gate:
            with contextlib.suppress(websockets.ConnectionClosed):  # a dropped socket's own close
                await (voice_session if kind == "voice" else world_session)(url, how)

    await asyncio.gather(*(one(kind) for kind, _ in jobs))


def health(server: ServerThread) -> dict[str, dict[str, object]]:
    services: dict[str, dict[str, object]] = httpx.get(server.http_url + "/health").json()["services"]
    return services


def gauges(server: ServerThread) -> str:
    return httpx.get(server.http_url + "/metrics").text


async def settled(server: ServerThread, baseline_fds: int) -> None:
    """Until every session is gone and descriptors are back (generous: parked ones must expire)."""
    for _ in range(600):
        services = health(server)
        text = gauges(server)
        is_idle = (
            services["voice"]["sessions"] == 0
            and services["world"]["sessions"] == 0
            and 'livegen_sessions_open{kind="voice"} 0.0' in text
            and 'livegen_sessions_open{kind="world"} 0.0' in text
            and "livegen_connections_open 0.0" in text
        )
        if is_idle and num_fds() <= baseline_fds:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"not back to baseline: fds {num_fds()} > {baseline_fds}; {health(server)}")


async def test_churn_leaves_nothing_behind(
    start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Churn, not capacity: admission by the frame clock would refuse tiny-world sessions on a busy box.
    server = start_server(resume_grace_s=0.5, max_connections=64, world_realtime_headroom=0)
    server.wait_ready()
    await churn(server.ws_url, 4, 4)  # warm up: lazily created pools and caches are not leaks
    await settled(server, num_fds() + 64)
    baseline_fds = num_fds()
    kv_before = health(server)["world"].get("kv")
    with caplog.at_level("INFO"):
        await churn(server.ws_url, NUM_VOICE, NUM_WORLD)
        await settled(server, baseline_fds)
    assert health(server)["world"].get("kv") == kv_before  # KV pages returned
    tracebacks = [r for r in caplog.records if r.exc_info is not None or "Traceback" in r.getMessage()]
    assert not tracebacks, tracebacks[0].getMessage()
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
