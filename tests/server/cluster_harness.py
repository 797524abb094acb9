"""What the cluster tests share: starting ``livegen serve --workers`` of the test models on Ray's
two-node test cluster, reaching each process, and a session's socket helpers.

A module of its own so that the cluster's test modules (``test_cluster``,
``test_cluster_speech``, ``test_cluster_stop``) each stay short; each makes
the fixtures here its own (``pytest.fixture(...)(harness.ray_nodes)``), so
that every module starts its own Ray cluster and stops it at its end.
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
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import websockets

HERE = Path(__file__).parent
#: The cluster's server-wide --max-sessions (each process alone would admit this many).
MAX_SESSIONS = 3
OPENED: list[Any] = []


async def close_clients() -> AsyncIterator[None]:
    yield
    while OPENED:
        with contextlib.suppress(Exception):
            await OPENED.pop().close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def env() -> dict[str, str]:
    paths = [str(HERE.parents[1] / "src"), str(HERE.parent), str(HERE)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def start_serve(extra_env: dict[str, str] | None = None, **config: Any) -> subprocess.Popen[bytes]:
    """A ``livegen serve`` (workers.run) of the test models, in its own process group."""
    options = {"api_key": None, "voice_model": "scripted-voice", "world_model": "procedural-world", **config}
    command = [sys.executable, str(HERE / "cluster_models.py"), json.dumps(options)]
    return subprocess.Popen(command, env={**env(), **(extra_env or {})}, start_new_session=True)


def health(port: int) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)


def wait_for(port: int, ready: Any, timeout: float = 180.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            answer = health(port)
            if answer.status_code == 200 and ready(body := answer.json()):
                return dict(body)
        time.sleep(0.3)
    raise RuntimeError("the servers did not become ready")


def stop(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


class Cluster:
    """The supervisor's port and its processes' private addresses, by tag."""

    def __init__(self, port: int, group: str, serve: subprocess.Popen[bytes]) -> None:
        self.port, self.group, self.serve = port, group, serve

    def processes(self) -> list[dict[str, Any]]:
        report = health(self.port).json()["cluster"]
        return [p for p in report["processes"] if p["group"] == self.group]


@dataclass
class RayNodes:
    """Ray's two-node test cluster, in a process of its own: its address, and that process."""

    address: str
    process: subprocess.Popen[str]


def ray_nodes() -> Iterator[RayNodes]:
    nodes = subprocess.Popen(
        [sys.executable, str(HERE / "cluster_models.py"), "--ray-cluster"],
        env=env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert nodes.stdin is not None and nodes.stdout is not None
    try:
        yield RayNodes(nodes.stdout.readline().strip(), nodes)
    finally:
        nodes.stdin.close()  # the cluster shuts down
        nodes.wait(60)
        nodes.stdout.close()


def cluster(ray_nodes: RayNodes) -> Iterator[Cluster]:
    port = free_port()
    serve = start_serve(
        workers=2, port=port, ray_address=ray_nodes.address, max_sessions=MAX_SESSIONS, drain_timeout_s=1.0
    )
    try:
        body = wait_for(port, lambda b: len(b["cluster"]["processes"]) == 2)
        yield Cluster(port, body["cluster"]["group"], serve)
    finally:
        stop(serve)


async def recv(ws: Any) -> dict[str, Any]:
    return dict(json.loads(await asyncio.wait_for(ws.recv(), 20)))


async def until(ws: Any, kind: str, into: list[dict[str, Any]]) -> dict[str, Any]:
    while True:
        event = await recv(ws)
        into.append(event)
        if event["type"] == kind:
            return event


async def open_voice(address: str) -> tuple[Any, list[dict[str, Any]]]:
    ws = await websockets.connect(f"{address}/v1/realtime?model=scripted-voice")
    OPENED.append(ws)
    seen: list[dict[str, Any]] = []
    await until(ws, "session.created", seen)
    return ws, seen


async def start_answer(address: str) -> tuple[Any, list[dict[str, Any]]]:
    ws, seen = await open_voice(address)
    await ws.send(json.dumps({"type": "response.create"}))
    for _ in range(3):
        await until(ws, "response.output_audio.delta", seen)
    return ws, seen


async def resume(address: str, session_id: str, token: str, last_seq: int) -> Any:
    ws = await websockets.connect(f"{address}/v1/realtime?session_id={session_id}")
    OPENED.append(ws)
    message = {"type": "session.resume", "session_id": session_id, "resume_token": token}
    await ws.send(json.dumps({**message, "last_event_seq": last_seq}))
    return ws


async def drop(ws: Any) -> None:
    """Lose the connection without a close frame, as a network drop does."""
    ws.transport.abort()
    with contextlib.suppress(Exception):
        await ws.wait_closed()


def audio_bytes(events: list[dict[str, Any]]) -> int:
    deltas = [e["delta"] for e in events if e["type"] == "response.output_audio.delta"]
    return sum(len(base64.b64decode(delta)) for delta in deltas)


async def duplex(address: str, first: dict[str, Any]) -> Any:
    """A vllm-omni duplex socket (``?duplex=1``): it opens or resumes with its first message."""
    ws = await websockets.connect(f"{address}/v1/realtime?duplex=1&model=scripted-voice&autostart=0")
    OPENED.append(ws)
    await ws.send(json.dumps(first))
    return ws


def http(address: str) -> str:
    return address.replace("ws://", "http://", 1)
