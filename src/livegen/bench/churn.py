"""``livegen bench churn``: memory and descriptors over many sessions, and what stays behind.

The server runs in a child process (the real app and uvicorn, in
``ServerThread``) so that its RSS and descriptors are its own; the child also
answers ``trim`` by calling glibc's ``malloc_trim(0)``, to tell memory the
allocator retains from memory still in use. The bench reports:

- churn: ``--sessions`` voice and world sessions (one in five world), each
  used briefly (a text turn, or one chunk) and then closed, dropped without a
  close frame, or closed with ``session.close``; RSS and fds before, right
  after, ``--settle`` seconds after, and after ``malloc_trim``;
- memory per idle voice session, and per voice session with 20 text turns of
  history (``conversation.item.create`` + ``response.create``);
- ``--slow-reader``: the RSS growth of one world client that acks every chunk
  index but never reads, over 60 s.

Figures are single runs on whatever else the machine is doing; say so when
quoting them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import time
from typing import Any

import click
import websockets

#: The child: a real server; ``stats`` prints RSS and fds, ``trim`` calls malloc_trim first. Its
#: malloc arenas are capped as ``livegen serve`` caps them (compare: MALLOC_ARENA_MAX=64 livegen bench churn).
CHILD = """
import ctypes, json, os, sys, time
from livegen.server.http.budgets import limit_malloc_arenas
limit_malloc_arenas()
from livegen.server.config import ServerConfig
from livegen.server.thread import ServerThread
server = ServerThread(ServerConfig(api_key=None, resume_grace_s=0.5, max_sessions=4096)).start()
server.wait_ready()
print(server.port, flush=True)
libc = ctypes.CDLL("libc.so.6")
for line in sys.stdin:
    started = time.perf_counter()
    if line.strip() == "trim":
        libc.malloc_trim(0)
    trim_ms = (time.perf_counter() - started) * 1000
    rss = int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1]) * 1024
    print(json.dumps({"rss": rss, "fds": len(os.listdir("/proc/self/fd")), "ms": trim_ms}), flush=True)
server.stop()
"""


class Child:
    def __init__(self, server_src: str | None = None) -> None:
        env = dict(os.environ, PYTHONPATH=server_src) if server_src else None
        self.process = subprocess.Popen(
            [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())
        self.url = f"ws://127.0.0.1:{self.port}"

    def stats(self, command: str = "stats") -> dict[str, float]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        result: dict[str, float] = json.loads(self.process.stdout.readline())
        return result

    def close(self) -> None:
        """End of input: the child stops its server (and the server its workers), then exits."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _text_item(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


async def _turn(ws: Any, text: str) -> None:
    await ws.send(json.dumps({"type": "conversation.item.create", "item": _text_item(text)}))
    await ws.send(json.dumps({"type": "response.create", "response": {"output_modalities": ["text"]}}))
    while json.loads(await ws.recv())["type"] != "response.done":
        pass


async def _one(url: str, kind: str, how: str) -> None:
    with contextlib.suppress(websockets.ConnectionClosed, OSError):
        async with websockets.connect(url + ("/v1/realtime" if kind == "voice" else "/v1/worlds")) as ws:
            if kind == "voice":
                await ws.recv()
                await _turn(ws, "hello there")
            else:
                await ws.send(json.dumps({"type": "session.update", "session": {"pacing": "asap"}}))
                await ws.recv()
                await ws.recv()
            if how == "drop":
                ws.transport.abort()
            elif how == "close_event":
                await ws.send(json.dumps({"type": "session.close"}))


async def _churn(url: str, num_sessions: int, at_once: int, world_share: float = 0.2) -> None:
    rng = random.Random(18)
    gate = asyncio.Semaphore(at_once)

    async def one() -> None:
        async with gate:
            kind = "world" if rng.random() < world_share else "voice"
            await _one(url, kind, rng.choice(["drop", "close", "close_event"]))

    await asyncio.gather(*(one() for _ in range(num_sessions)))


async def _open_sessions(child: Child, num: int, turns: int) -> list[Any]:
    sockets = [await websockets.connect(child.url + "/v1/realtime", max_size=None) for _ in range(num)]
    for ws in sockets:
        await ws.recv()
        for index in range(turns):
            await _turn(ws, f"turn {index}: tell me about the weather today")
    return sockets


async def _per_session(child: Child, num: int, turns: int) -> float:
    """RSS growth per open voice session with ``turns`` text turns of history, in bytes.

    A first round opens and closes as many, so that the allocators' high-water
    marks are reached before the round that is measured.
    """
    for ws in await _open_sessions(child, num, turns):
        await ws.close()
    await asyncio.sleep(2)  # parked or closing sessions end
    before = child.stats()["rss"]
    sockets = await _open_sessions(child, num, turns)
    during = child.stats()["rss"]
    for ws in sockets:
        await ws.close()
    return (during - before) / num


def _slow_reader_rss(child: Child, seconds: float) -> tuple[float, float]:
    """RSS before and after ``seconds`` of a world client that acks everything and reads nothing."""
    sock = socket.create_connection(("127.0.0.1", child.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    request = (
        f"GET /v1/worlds HTTP/1.1\r\nHost: 127.0.0.1:{child.port}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n"
    )
    sock.sendall(request.encode())
    sock.recv(1024)
    before = child.stats("trim")["rss"]

    def send(event: dict[str, Any]) -> None:
        payload = json.dumps(event).encode()  # mask 0: the payload goes as is
        sock.sendall(bytes([0x81, 0x80 | len(payload), 0, 0, 0, 0]) + payload)

    session = {"pacing": "asap", "max_chunks_ahead": 256, "output": {"format": "rgb24"}}
    send({"type": "session.update", "session": session})
    deadline, index = time.monotonic() + seconds, 0
    with contextlib.suppress(OSError):
        while time.monotonic() < deadline:
            send({"type": "chunk.ack", "chunk_index": index})
            index += 1
            time.sleep(0.01)
    after = child.stats()["rss"]
    sock.close()
    return before, after


def _mib(num_bytes: float) -> str:
    return f"{num_bytes / 2**20:.1f} MiB"


@click.command("churn")
@click.option("--sessions", default=10_000, show_default=True, type=click.IntRange(1))
@click.option(
    "--at-once", default=32, show_default=True, type=click.IntRange(1), help="Sessions open at once."
)
@click.option("--settle", default=30.0, show_default=True, help="Seconds to wait after the churn.")
@click.option("--per-session", default=50, show_default=True, help="Sessions for the memory per session.")
@click.option("--slow-reader", "slow_reader_s", default=0.0, help="Seconds of a never-reading world client.")
@click.option("--world-share", default=0.2, show_default=True, help="Share of world sessions in the churn.")
@click.option("--server-src", default=None, help="PYTHONPATH for the server (e.g. another checkout's src).")
def command(
    sessions: int,
    at_once: int,
    settle: float,
    per_session: int,
    slow_reader_s: float,
    world_share: float,
    server_src: str | None,
) -> None:
    """Churn sessions through a server; report RSS and fds before, after and settled, and trim."""
    child = Child(server_src)
    try:
        asyncio.run(_churn(child.url, 20, 4))  # warm up: caches and pools are not leaks
        time.sleep(2)
        before = child.stats()
        started = time.monotonic()
        asyncio.run(_churn(child.url, sessions, at_once, world_share))
        elapsed = time.monotonic() - started
        after = child.stats()
        time.sleep(settle)
        settled = child.stats()
        trimmed = child.stats("trim")
        click.echo(f"churn: {sessions} sessions in {elapsed:.1f} s, {at_once} at once")
        click.echo(f"  malloc_trim took {trimmed['ms']:.0f} ms")
        for name, stats in [("before", before), ("after", after), ("settled", settled), ("trimmed", trimmed)]:
            click.echo(f"  {name:<8} rss {_mib(stats['rss'])}  fds {stats['fds']}")
        if per_session:
            idle = asyncio.run(_per_session(child, per_session, 0))
            history = asyncio.run(_per_session(child, per_session, 20))
            click.echo(f"per idle voice session: {idle / 1024:.0f} KiB")
            click.echo(f"per voice session with 20 text turns: {history / 1024:.0f} KiB")
        if slow_reader_s:
            rss_before, rss_after = _slow_reader_rss(child, slow_reader_s)
            growth = f"{_mib(rss_before)} -> {_mib(rss_after)}"
            click.echo(f"never-reading world client: rss {growth} after {slow_reader_s:g} s")
    finally:
        child.close()
