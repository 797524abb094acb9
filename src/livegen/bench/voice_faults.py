"""``livegen bench voice-faults``: a real server under a huge "say", a stopped speech worker, a long sentence.

Everything is measured from outside, over the wire, against a server started
as a subprocess (``python -m livegen serve``, the cascade voice model and the
procedural world), while two probes run on their own thread and event loop
(so the bench's own work on a 200 KB message does not count): ``/health``
asked every 20 ms (its slowest answer bounds the longest event-loop stall)
and a world stream whose chunk arrival gaps are recorded (normal: one
chunk's time, 250 ms). ``--server-src`` runs the server from another
checkout's ``src`` (the code before a fix, say), for a side-by-side figure.

- (a) stall: a client sends a user item of "say " and 200 KB of words, then
  ``response.create``; the probes' worst figures over the next seconds.
- (b), (c) stopped worker: one client asks for a long sentence; the worker
  speaking it is sent SIGSTOP (read from ``/health``); reported are the time
  to ``/health`` 503, to that client's ``response.done`` ``failed``, to
  ``/health`` 200 again, and the world's worst chunk gap meanwhile.
- (d) fairness: another session's first audio (``response.create`` to the
  first ``response.output_audio.delta``) for "say hello there", alone and
  while one client is spoken a 600-word sentence; medians of ``--repeats``.

The machine may be shared: report figures with the load they were taken under.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import click
import httpx
import websockets

from livegen.client.world import WorldClient

LONG_SENTENCE = "say " + " ".join(["the quick brown fox jumps over the lazy dog"] * 67)  # ~600 words
HUGE_SAY = "say " + "word " * 40_000  # 200 KB


class Probes:
    """``/health`` every 20 ms and a world stream, on a thread of their own, recorded meanwhile."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.health: list[tuple[float, float, int]] = []  # (sent at, seconds to answer, status)
        self.chunks: list[float] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="probes", daemon=True)
        self._tasks: list[concurrent.futures.Future[None]] = []

    async def start(self) -> None:
        self._thread.start()
        for probe in (self._poll(), self._world()):
            self._tasks.append(asyncio.run_coroutine_threadsafe(probe, self._loop))

    async def _poll(self) -> None:
        async with httpx.AsyncClient(timeout=600) as http:
            while True:
                sent = time.monotonic()
                status = (await http.get(f"{self.base}/health")).status_code
                self.health.append((sent, time.monotonic() - sent, status))
                await asyncio.sleep(0.02)

    async def _world(self) -> None:
        async with await WorldClient.connect(self.base.replace("http", "ws")) as world:
            await world.create(pacing="realtime")
            while True:
                await world.next_chunk(wait_s=600)
                self.chunks.append(time.monotonic())

    def worst(self, start: float, end: float) -> dict[str, float | None]:
        health = [latency for sent, latency, _ in self.health if start <= sent <= end]
        before = [t for t in self.chunks if t < start][-1:]  # a stall that began before the window
        arrivals = before + [t for t in self.chunks if start <= t <= end]
        gaps = [b - a for a, b in itertools.pairwise(arrivals)]
        return {
            "health_max_ms": _ms(max(health, default=None)),
            "health_median_ms": _ms(statistics.median(health) if health else None),
            "world_gap_max_ms": _ms(max(gaps, default=None)),
            "world_gap_median_ms": _ms(statistics.median(gaps) if gaps else None),
        }

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(1000 * seconds, 1)


class Voice:
    """One raw Realtime session."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.events: list[tuple[float, dict[str, Any]]] = []
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, base: str) -> Any:
        async with websockets.connect(f"{base.replace('http', 'ws')}/v1/realtime", max_size=None) as ws:
            voice = cls(ws)
            await voice.wait("session.created")
            try:
                yield voice
            finally:
                voice._reader.cancel()

    async def _read(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for message in self.ws:
                self.events.append((time.monotonic(), json.loads(message)))

    async def ask(self, text: str) -> float:
        """Send a user item and ``response.create``; the time it was sent."""
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
        await self.ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
        sent = time.monotonic()
        await self.ws.send(json.dumps({"type": "response.create"}))
        return sent

    async def wait(
        self, kind: str, after: float = 0.0, within: float = 300.0
    ) -> tuple[float, dict[str, Any]]:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            for at, event in self.events:
                if at >= after and event["type"] == kind:
                    return at, event
            await asyncio.sleep(0.005)
        raise TimeoutError(f"no {kind} within {within} s")

    async def cancel(self) -> None:
        await self.ws.send(json.dumps({"type": "response.cancel"}))


async def first_audio(base: str, repeats: int) -> list[float]:
    """Seconds from ``response.create`` to the first audio of "say hello there", ``repeats`` times."""
    times = []
    async with Voice.open(base) as voice:
        for _ in range(repeats):
            sent = await voice.ask("say hello there")
            at, _ = await voice.wait("response.output_audio.delta", after=sent)
            times.append(at - sent)
            await voice.wait("response.done", after=sent)
    return times


async def stall(base: str, probes: Probes) -> dict[str, float | None]:
    async with Voice.open(base) as voice:
        start = await voice.ask(HUGE_SAY)
        await asyncio.sleep(5.0)
        await voice.cancel()
    return probes.worst(start, start + 5.0)


async def fairness(base: str, repeats: int) -> dict[str, Any]:
    alone = await first_audio(base, repeats)
    async with Voice.open(base) as talker:
        sent = await talker.ask(LONG_SENTENCE)
        await talker.wait("response.output_audio.delta", after=sent)
        loaded = await first_audio(base, repeats)
        await talker.cancel()
    return {
        "alone_ms": [1000 * t for t in alone],
        "with_long_sentence_ms": [1000 * t for t in loaded],
        "alone_median_ms": 1000 * statistics.median(alone),
        "with_long_sentence_median_ms": 1000 * statistics.median(loaded),
        "ratio": statistics.median(loaded) / statistics.median(alone),
    }


async def stopped_worker(base: str, probes: Probes) -> dict[str, Any]:
    async with Voice.open(base) as talker, httpx.AsyncClient(timeout=600) as http:
        sent = await talker.ask(LONG_SENTENCE)
        await talker.wait("response.output_audio.delta", after=sent)
        workers = (await http.get(f"{base}/health")).json()["services"]["voice"]["tts_workers"]
        pid = next(w["pid"] for w in workers if w["state"] == "busy")
        stopped_at = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        try:
            _, done = await talker.wait("response.done", after=sent, within=120)
            failed_at = time.monotonic()
            while (await http.get(f"{base}/health")).status_code != 200:  # noqa: ASYNC110 - polling a server
                await asyncio.sleep(0.02)
            healthy_at = time.monotonic()
            unhealthy = [s for s, _, status in probes.health if s >= stopped_at and status == 503]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    return {
        "affected_status": done["response"]["status"],
        "to_health_503_s": (unhealthy[0] - stopped_at) if unhealthy else None,
        "to_response_failed_s": failed_at - stopped_at,
        "to_health_200_again_s": healthy_at - stopped_at,
        **probes.worst(stopped_at, healthy_at),
    }


def _serve(port: int, tts_workers: int | None, src: Path | None) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "livegen", "serve", "--port", str(port), "--log-level", "warning"]
    argv += ["--world-model", "procedural-world"]
    env = dict(os.environ)
    if tts_workers:
        env["LIVEGEN_TTS_WORKERS"] = str(tts_workers)
    if src is not None:
        env["PYTHONPATH"] = str(src.resolve())
    return subprocess.Popen(argv, env=env)


def _wait_ready(base: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base}/health").status_code == 200:
                return
        time.sleep(0.2)
    raise click.ClickException("the server did not become ready")


async def measure(base: str, repeats: int) -> dict[str, Any]:
    probes = Probes(base)
    await probes.start()
    try:
        await asyncio.sleep(5.0)
        result: dict[str, Any] = {"quiet": probes.worst(0.0, time.monotonic())}
        sections: dict[str, Callable[[], Awaitable[Any]]] = {
            "huge_say": lambda: stall(base, probes),
            "fairness": lambda: fairness(base, repeats),
            "stopped_worker": lambda: stopped_worker(base, probes),
        }
        for name, section in sections.items():
            try:
                result[name] = await section()
            except Exception as exc:  # a server without the fix may not survive a section
                result[name] = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        await probes.stop()
    return result


@click.command("voice-faults")
@click.option("--repeats", default=5, show_default=True, type=click.IntRange(1), help="First-audio samples.")
@click.option("--tts-workers", type=click.IntRange(1), default=None, help="Speech workers of the server.")
@click.option(
    "--server-src",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="Run the server from this src folder (another checkout) [default: this livegen].",
)
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write the figures here."
)
def command(repeats: int, tts_workers: int | None, server_src: Path | None, json_path: Path | None) -> None:
    """Event-loop stall, world gaps, a stopped speech worker and fairness, measured over the wire."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    server = _serve(port, tts_workers, server_src)
    try:
        _wait_ready(base)
        result = asyncio.run(measure(base, repeats))
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    click.echo(json.dumps(result, indent=2))
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=2))
