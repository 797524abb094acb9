"""Issue 37 item 13 over the wire for a plain ``livegen serve``: an idle speech worker stopped.

The cluster's shared speech service has its own heartbeat test
(tests/server/test_cluster_speech.py); this is the in-process case: the
default cascade's ``--tts-workers 2`` worker processes, supervised by
``models/cascade/supervisor.py``. One of them is sent SIGSTOP while idle (as a
synthesiser frozen in native code, or a debugger, looks); ``/health`` must
stop naming it ready (it is killed and replaced), and a session asking for
speech meanwhile gets audio from the other worker or a typed failure, never a
hang. The server is a real ``python -m livegen serve`` subprocess, so its
workers are its children, found by ``/health`` as an operator would.
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import websockets

pytestmark = pytest.mark.slow

SRC = Path(__file__).resolve().parents[3] / "src"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def served() -> Iterator[str]:
    port = _free_port()
    pythonpath = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": pythonpath, "LIVEGEN_TTS_WORKERS": "2"}
    command = [sys.executable, "-m", "livegen", "serve", "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--world-model", "none"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _until(lambda: _health(base)[0] == 200, "the server did not become ready", process)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=60)


def _health(base: str) -> tuple[int, dict[str, Any]]:
    try:
        answer = httpx.get(f"{base}/health", timeout=30)
    except httpx.TransportError:
        return 0, {}
    return answer.status_code, answer.json()


def _until(check: Any, message: str, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + 120  # a bound against a hang, not a speed figure
    while not check():
        assert process is None or process.poll() is None, "the server exited"
        assert time.monotonic() < deadline, message
        time.sleep(0.05)


def _workers(body: dict[str, Any]) -> list[dict[str, Any]]:
    workers: list[dict[str, Any]] = body["services"]["voice"]["tts_workers"]
    return workers


async def _speak(base: str, text: str) -> tuple[str, int, dict[str, Any]]:
    """One session's answer to ``text``: its status, its audio's bytes, its ``response.done``."""
    url = base.replace("http", "ws", 1) + "/v1/realtime"
    async with websockets.connect(url, max_size=None) as ws:
        await asyncio.wait_for(ws.recv(), 60)  # session.created
        content = [{"type": "input_text", "text": text}]
        item = {"type": "message", "role": "user", "content": content}
        await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
        await ws.send(json.dumps({"type": "response.create", "response": {"output_modalities": ["audio"]}}))
        audio = 0
        while True:
            event = json.loads(await asyncio.wait_for(ws.recv(), 120))  # never a hang
            if event["type"] == "response.output_audio.delta":
                audio += len(base64.b64decode(event["delta"]))
            if event["type"] == "response.done":
                return event["response"]["status"], audio, event


def test_an_idle_worker_stopped_is_seen_on_health_and_replaced_while_sessions_are_answered(
    served: str,
) -> None:
    before = _workers(_health(served)[1])
    assert [w["state"] for w in before] == ["ready", "ready"]
    stopped = before[1]["pid"]
    os.kill(stopped, signal.SIGSTOP)
    seen: list[tuple[int, list[tuple[str, int | None]]]] = []
    try:
        answers = [asyncio.run(_speak(served, "say hello there")) for _ in range(3)]

        def replaced() -> bool:
            status, body = _health(served)
            seen.append((status, [(w["state"], w["pid"]) for w in _workers(body)]))
            return status == 200 and stopped not in [w["pid"] for w in _workers(body)]

        _until(replaced, f"/health still names the stopped worker {stopped}: {seen[-3:]}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(stopped, signal.SIGCONT)
    for status, audio, done in answers:
        # The stopped worker may have been handed a part before its silence was noticed: that
        # answer fails with the typed error; every other one is spoken by the live worker.
        if status == "failed":
            assert "speech_worker_stuck" in json.dumps(done["response"]["status_details"])
        else:
            assert status == "completed" and audio > 24_000, done
    assert any(status == "completed" for status, _, _ in answers)
    after = _workers(_health(served)[1])
    assert after[1]["starts"] == 2 and after[0]["pid"] == before[0]["pid"], after
    # The stopped process was killed (reaped or a zombie of the server), not left frozen.
    assert not psutil.pid_exists(stopped) or psutil.Process(stopped).status() == psutil.STATUS_ZOMBIE
