"""The cascade under abuse, over the wire: a huge "say", a stopped speech worker.

A real server on a loopback port, raw WebSocket clients, the real cascade
(Piper in its worker processes). What must hold: one client's input or one
stuck worker costs that client its answer at most, never another session's,
and ``/health`` says what is wrong while it is.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest
import websockets

from livegen.models.cascade import responder
from livegen.server.thread import ServerThread

pytestmark = pytest.mark.slow


class Client:
    """One raw Realtime session: events recorded as they come."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for message in self.ws:
                self.events.append(json.loads(message))

    async def ask(self, text: str, modalities: tuple[str, ...] = ("audio",)) -> None:
        content = [{"type": "input_text", "text": text}]
        item = {"type": "message", "role": "user", "content": content}
        await self.ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
        response = {"output_modalities": list(modalities)}
        await self.ws.send(json.dumps({"type": "response.create", "response": response}))

    async def wait_for(self, kind: str, within: float = 120.0, **match: Any) -> dict[str, Any]:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            for event in self.events:
                if event["type"] == kind and all(_get(event, k) == v for k, v in match.items()):
                    return event
            await asyncio.sleep(0.01)
        raise AssertionError(f"no {kind} {match} within {within} s; got {[e['type'] for e in self.events]}")

    def audio(self) -> bytes:
        deltas = [e["delta"] for e in self.events if e["type"] == "response.output_audio.delta"]
        return b"".join(base64.b64decode(delta) for delta in deltas)

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader


def _get(event: dict[str, Any], dotted: str) -> Any:
    value: Any = event
    for name in dotted.split("__"):
        value = value.get(name) if isinstance(value, dict) else None
    return value


@contextlib.asynccontextmanager
async def session(server: ServerThread) -> Any:
    async with websockets.connect(f"{server.ws_url}/v1/realtime", max_size=None) as ws:
        client = Client(ws)
        await client.wait_for("session.created", within=30)
        try:
            yield client
        finally:
            await client.close()


async def test_a_huge_say_is_answered_in_bounded_text_while_another_session_is_served(
    default_server: ServerThread,
) -> None:
    huge = "say " + "word " * 40_000  # 200 KB: splitting it froze the old server for 3.4 s
    async with session(default_server) as talker, session(default_server) as other:
        await talker.ask(huge, modalities=("text",))
        await other.ask("say hello there")
        said = await other.wait_for("response.done")
        done = await talker.wait_for("response.done")
    assert said["response"]["status"] == "completed" and len(other.audio()) > 24_000
    assert done["response"]["status"] == "completed"
    text = "".join(e["delta"] for e in talker.events if e["type"] == "response.output_text.delta")
    assert text.startswith("Word word") and text.endswith(responder.TOO_LONG_TO_REPEAT)
    assert len(text) < responder.MAX_HEARD_CHARS + 100


async def test_a_stopped_speech_worker_fails_only_its_session_and_is_replaced(
    default_server: ServerThread,
) -> None:
    pool = default_server.app.state.livegen.registry.load("cascade").worker
    sentence = "say " + " ".join(["the quick brown fox jumps over the lazy dog"] * 40)
    async with session(default_server) as talker, session(default_server) as other:
        talker_id = talker.events[0]["session"]["id"]
        await talker.ask(sentence)
        await talker.wait_for("response.output_audio.delta")
        slot = await _busy_slot(pool, talker_id)
        stopped = slot.pid()
        os.kill(stopped, signal.SIGSTOP)  # as a synthesiser stuck in native code looks
        try:
            failed = await talker.wait_for("response.done", within=60)
            async with httpx.AsyncClient() as http:
                health = await http.get(f"{default_server.http_url}/health")
            await other.ask("say hello there")
            answered = await other.wait_for("response.done")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGCONT)
        assert failed["response"]["status"] == "failed"
        assert "speech_worker_stuck" in failed["response"]["status_details"]["error"]["message"]
        assert answered["response"]["status"] == "completed" and len(other.audio()) > 24_000
        await talker.ask("say I am back")  # the failed session goes on
        again = await talker.wait_for("response.done", response__status="completed")
    assert again["response"]["status"] == "completed"
    voice = health.json()["services"]["voice"]
    assert health.status_code == 503 and voice["ready"] is False
    assert f"pid {stopped}" in voice["reason"] and "stopped answering" in voice["reason"]
    assert any(worker["state"] == "restarting" for worker in voice["tts_workers"])
    await _until_healthy(default_server)
    assert stopped not in pool.pids()


async def _busy_slot(pool: Any, owner: str) -> Any:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for slot in pool.slots:
            if slot.owner == owner:
                return slot
        await asyncio.sleep(0.005)
    raise AssertionError(f"no worker is speaking for {owner}")


async def _until_healthy(server: ServerThread) -> None:
    deadline = time.monotonic() + 120
    async with httpx.AsyncClient() as http:
        while time.monotonic() < deadline:
            if (await http.get(f"{server.http_url}/health")).status_code == 200:
                return
            await asyncio.sleep(0.05)
    raise AssertionError("the server did not become healthy again")


def test_serve_runs_as_many_speech_workers_as_asked() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, "-m", "livegen", "serve", "--port", str(port), "--world-model", "none"]
    process = subprocess.Popen([*argv, "--tts-workers", "3"], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                health = httpx.get(f"http://127.0.0.1:{port}/health")
                if health.status_code == 200:
                    break
            assert process.poll() is None, "the server exited"
            time.sleep(0.2)
        workers = health.json()["services"]["voice"]["tts_workers"]
        assert [w["state"] for w in workers] == ["ready"] * 3
        assert len({w["pid"] for w in workers}) == 3
    finally:
        process.terminate()
        process.wait(timeout=30)
