"""Budgets that hold whatever a client does: unsent bytes, acks of unread chunks, connections,
the first-message deadline, and their gauges in /metrics.

The runner-level tests use a world-model test double (blank frames); the
wire tests run the real server and real clients.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import socket
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import numpy as np
import pytest
import websockets
from websockets.exceptions import ConnectionClosed, InvalidStatus

from livegen.models.room import game
from livegen.models.world import Chunk, Tick
from livegen.runtime.world.kv_pool import required_bytes
from livegen.runtime.world.runner import Options, Runner
from livegen.runtime.world.scheduler import Scheduler
from livegen.server.http import budgets
from livegen.server.http.budgets import CLOSE_FIRST_MESSAGE_TIMEOUT, CLOSE_NOT_READING
from livegen.server.thread import ServerThread
from livegen.world import Manager
from runtime.world.harness import GEOMETRY

StartServer = Callable[..., ServerThread]


class BlankKVModel:
    """Blank 32x32 frames, four per chunk."""

    name = "blank-kv"
    spec = game.room_spec(kv=GEOMETRY)

    def new_kv_storage(self, num_pages: int) -> list[int]:
        return [0] * num_pages

    def step(self, ticks: Sequence[Tick], kv_storage: Any) -> list[Chunk]:
        return [Chunk(t.meta, np.zeros((4, 32, 32, 3), np.uint8)) for t in ticks]

    def release(self, session_id: str) -> None:
        pass


def stuck_runner(options: Options, max_unsent_bytes: int | None = None) -> tuple[Runner, BlankKVModel]:
    """A runner whose socket never accepts a byte (a client that does not read)."""
    model = BlankKVModel()
    scheduler = Scheduler(model, kv_budget_bytes=required_bytes(GEOMETRY, 4, 1), clock=lambda: 0.0)
    manager = Manager(tracks=model.spec.controls, new_id=lambda: "x")
    stuck = asyncio.Event()

    async def never_sends(message: Any) -> None:
        await stuck.wait()

    session = manager.create()
    runner = Runner(
        session, manager, scheduler, never_sends, never_sends, options, max_unsent_bytes=max_unsent_bytes
    )
    runner.start()
    return runner, model


def step(runner: Runner, model: BlankKVModel) -> None:
    plan = runner.begin_tick(0.0)
    assert plan is not None
    [chunk] = model.step([Tick(plan.meta, 0, "", {})], None)
    runner.tick_done(plan, chunk, 1.0)


async def test_acks_of_chunks_never_written_open_no_credit() -> None:
    """The client acks indexes it never read: those chunks still sit here, so no new tick."""
    runner, model = stuck_runner(Options(pacing="asap", max_chunks_ahead=1))
    step(runner, model)
    assert not runner.is_due(0.0)  # one chunk ahead, none acked
    runner.ack(10**6)
    assert not runner.is_due(0.0)  # chunk 0 was never written: its ack is no credit
    assert runner.sender.unsent_bytes >= 4 * 32 * 32 * 3
    runner.abort_sending()
    assert runner.sender.unsent_bytes == 0


async def test_unsent_bytes_past_the_budget_stop_the_runner_and_flag_it() -> None:
    runner, model = stuck_runner(Options(pacing="asap", max_chunks_ahead=8), max_unsent_bytes=20_000)
    step(runner, model)
    assert not runner.sender.overflowed.is_set() and runner.is_due(0.0)
    step(runner, model)  # 2 x 12,288 raw bytes queued: over 20,000
    assert runner.sender.overflowed.is_set() and runner.sender.is_overflowing
    assert not runner.is_due(0.0)  # nothing more is made for a client that does not read
    runner.abort_sending()


def metric(server: ServerThread, metric_name: str, **labels: str) -> float:
    text = httpx.get(f"{server.http_url}/metrics").text
    label_text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = "(?m)^" + re.escape(metric_name + (f"{{{label_text}}}" if labels else "")) + r" (\S+)$"
    found = re.search(pattern, text)
    return float(found.group(1)) if found else 0.0


async def until_metric(server: ServerThread, value: float, metric_name: str, **labels: str) -> None:
    for _ in range(600):
        if metric(server, metric_name, **labels) == value:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{metric_name} never became {value}")


class RawWebSocket:
    """A hand-rolled WebSocket client on a blocking socket with a tiny receive buffer.

    It reads nothing until told to (no library reader behind it), so the
    server's bytes stop in the kernel at once, as with a client that never reads.
    """

    def __init__(self, port: int, path: str) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        self.buffer = b""
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self.sock.recv(4096)
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head

    def send_json(self, event: dict[str, Any]) -> None:
        payload = json.dumps(event).encode()
        mask = os.urandom(4)
        assert len(payload) < 65536
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        size = (
            bytes([0x80 | len(payload)])
            if len(payload) < 126
            else bytes([0x80 | 126]) + len(payload).to_bytes(2, "big")
        )
        self.sock.sendall(bytes([0x81]) + size + mask + masked)

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed without a close frame")
            self.buffer += data
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def read_until_close(self) -> tuple[list[dict[str, Any]], int]:
        """Every text event up to the close frame, and the close code."""
        self.sock.settimeout(60)
        events: list[dict[str, Any]] = []
        while True:
            first, second = self._read(2)
            size = second & 0x7F
            if size >= 126:
                size = int.from_bytes(self._read(2 if size == 126 else 8), "big")
            payload = self._read(size)
            if first & 0x0F == 0x1:
                events.append(json.loads(payload))
            elif first & 0x0F == 0x8:
                return events, int.from_bytes(payload[:2], "big")


async def test_a_world_client_that_does_not_read_is_closed_with_4002(start_server: StartServer) -> None:
    server = start_server(world_model="procedural-world", voice_model="none", max_unsent_bytes=64 * 1024)
    server.wait_ready()
    client = RawWebSocket(server.port, "/v1/worlds")
    with client.sock:
        session = {"pacing": "asap", "max_chunks_ahead": 256, "output": {"format": "rgb24"}}
        client.send_json({"type": "session.update", "session": session})
        for index in range(100_000):  # acks of chunks it never read, until the server gives up
            client.send_json({"type": "chunk.ack", "chunk_index": index})
            if metric(server, "livegen_refused_total", code="unsent_bytes_exceeded") >= 1:
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the server never closed a client that does not read")
        events, code = client.read_until_close()
    assert code == CLOSE_NOT_READING
    assert events[-1]["type"] == "error" and events[-1]["error"]["code"] == "unsent_bytes_exceeded"
    assert metric(server, "livegen_sessions_open", kind="world") == 0
    assert metric(server, "livegen_unsent_bytes") == 0


async def test_a_voice_client_that_does_not_read_is_closed_with_4002(start_server: StartServer) -> None:
    server = start_server(world_model="none", max_unsent_bytes=64 * 1024, resume_grace_s=30)
    server.wait_ready()
    client = RawWebSocket(server.port, "/v1/realtime")
    text = "words " * 10_000  # each item comes back whole in conversation.item.added and .done
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    with client.sock:
        for _ in range(2000):  # quick: the server's pings go unanswered meanwhile (40 s to a drop)
            client.send_json({"type": "conversation.item.create", "item": item})
            if metric(server, "livegen_refused_total", code="unsent_bytes_exceeded") >= 1:
                break
            await asyncio.sleep(0.001)
        else:
            pytest.fail("the server never closed a client that does not read")
        events, code = client.read_until_close()
    assert code == CLOSE_NOT_READING
    assert [e["type"] for e in events[-2:]] == ["error", "session.closed"], [e["type"] for e in events[-6:]]
    assert events[-2]["error"]["code"] == "unsent_bytes_exceeded"
    assert events[-1]["reason"] == "outbox_overflow"
    assert metric(server, "livegen_sessions_open", kind="voice") == 0  # ended, not parked
    assert metric(server, "livegen_unsent_bytes") == 0


async def test_connections_past_the_cap_are_refused_with_503(start_server: StartServer) -> None:
    server = start_server(world_model="procedural-world", voice_model="none", max_connections=2)
    server.wait_ready()
    url = server.ws_url + "/v1/worlds"
    async with websockets.connect(url), websockets.connect(url):
        assert metric(server, "livegen_connections_open") == 2
        with pytest.raises(InvalidStatus) as refused:
            await websockets.connect(url)
        assert refused.value.response.status_code == 503
        assert json.loads(refused.value.response.body)["error"]["code"] == "too_many_connections"
    await until_metric(server, 0, "livegen_connections_open")
    async with websockets.connect(url):  # room again once they close
        pass
    assert metric(server, "livegen_refused_total", code="too_many_connections") == 1


@pytest.mark.parametrize("path", ["/v1/worlds", "/v1/realtime"])
async def test_a_silent_socket_is_closed_with_4003(start_server: StartServer, path: str) -> None:
    server = start_server(first_message_timeout_s=0.5)
    server.wait_ready()
    async with websockets.connect(server.ws_url + path) as ws:
        with pytest.raises(ConnectionClosed) as closed:
            async with asyncio.timeout(30):
                while True:
                    await ws.recv()  # voice sends session.created; the client says nothing
    assert closed.value.rcvd is not None and closed.value.rcvd.code == CLOSE_FIRST_MESSAGE_TIMEOUT
    await until_metric(server, 0, "livegen_sessions_open", kind="voice")  # ended, not parked


async def test_a_socket_that_speaks_in_time_is_not_closed(start_server: StartServer) -> None:
    server = start_server(world_model="procedural-world", voice_model="none", first_message_timeout_s=0.5)
    server.wait_ready()
    async with websockets.connect(server.ws_url + "/v1/worlds") as ws:
        await ws.send(json.dumps({"type": "session.update", "session": {"pacing": "realtime"}}))
        assert json.loads(await ws.recv())["type"] == "session.created"
        await asyncio.sleep(1.0)  # past the deadline: the first message came in time
        await ws.send(json.dumps({"type": "session.close"}))
        async with asyncio.timeout(30):
            while True:
                message = await ws.recv()
                if isinstance(message, str) and json.loads(message)["type"] == "session.closed":
                    break


def test_budgets_are_gauges_in_metrics(start_server: StartServer) -> None:
    server = start_server(world_model="none", voice_model="none", max_unsent_bytes=12345, max_connections=7)
    assert metric(server, "livegen_budget", name="max_unsent_bytes") == 12345
    assert metric(server, "livegen_budget", name="max_connections") == 7
    assert metric(server, "livegen_budget", name="first_message_timeout_seconds") == 30
    text = httpx.get(f"{server.http_url}/metrics").text
    assert "livegen_unsent_bytes " in text and "livegen_connections_open " in text


async def test_memory_is_trimmed_once_after_a_mass_of_connections_ends(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    trims: list[int] = []
    monkeypatch.setattr(budgets, "_malloc_trim", lambda: trims.append(1))
    server = start_server(world_model="procedural-world", voice_model="none")
    server.wait_ready()
    sockets = [await websockets.connect(server.ws_url + "/v1/worlds") for _ in range(budgets.TRIM_AFTER + 4)]
    assert not trims
    for ws in sockets:
        await ws.close()
    await until_metric(server, 0, "livegen_connections_open")
    for _ in range(100):
        if trims:
            break
        await asyncio.sleep(0.05)
    assert trims == [1]


@pytest.mark.parametrize(
    ("env", "expected"), [({}, str(max(2, os.cpu_count() or 2))), ({"MALLOC_ARENA_MAX": "4"}, "None")]
)
def test_malloc_arenas_are_capped_at_the_cores_unless_the_user_set_them(
    env: dict[str, str], expected: str
) -> None:
    import platform
    import subprocess
    import sys

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("mallopt's arena cap is glibc's")
    code = "from livegen.server.http.budgets import limit_malloc_arenas; print(limit_malloc_arenas())"
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env
    result = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == expected
