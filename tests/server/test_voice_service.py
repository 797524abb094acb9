"""The voice service's seams: readiness while the model loads, session gauges, shutdown terminals."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import websockets

from livegen.server.thread import ServerThread
from voice.scripted import SlowLoadingVoice, registry, slow_registry


async def test_not_ready_until_the_model_has_loaded(start_server: Callable[..., ServerThread]) -> None:
    SlowLoadingVoice.release.clear()
    server = start_server(registry=slow_registry(), voice_model="slow-voice", world_model="none")
    async with httpx.AsyncClient() as http:
        health = await http.get(f"{server.http_url}/health")
    assert health.status_code == 503 and health.json()["services"]["voice"]["ready"] is False
    async with websockets.connect(f"{server.ws_url}/v1/realtime") as ws:
        refusal = json.loads(await ws.recv())
        assert refusal["type"] == "error" and refusal["error"]["code"] == "model_not_ready"
    SlowLoadingVoice.release.set()
    server.wait_ready(timeout=30)
    async with httpx.AsyncClient() as http:
        health = await http.get(f"{server.http_url}/health")
    assert health.json()["services"]["voice"]["ready"] is True


def gauge(server: ServerThread) -> float:
    for line in server.app.state.livegen.metrics.render().decode().splitlines():
        if line.startswith('livegen_sessions_open{kind="voice"}'):
            return float(line.split()[-1])
    raise AssertionError("no voice gauge")


async def test_sessions_are_counted_and_each_ends_with_one_terminal(
    start_server: Callable[..., ServerThread],
) -> None:
    server = start_server(
        registry=registry(), voice_model="scripted-voice", world_model="none", max_sessions=2
    )
    server.wait_ready(timeout=30)
    url = f"{server.ws_url}/v1/realtime"
    async with websockets.connect(url) as first, websockets.connect(url) as second:
        assert "session.created" in await first.recv() and "session.created" in await second.recv()
        assert gauge(server) == 2
        async with websockets.connect(url) as third:
            refusal = json.loads(await third.recv())
            assert refusal["error"]["code"] == "too_many_sessions"
        await first.send(json.dumps({"type": "session.close"}))
        events = [json.loads(m) async for m in first]  # until the server closes the socket
        assert [e["type"] for e in events] == ["session.closed"]
    async with websockets.connect(url) as again:
        assert "session.created" in await again.recv()
