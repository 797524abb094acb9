"""``livegen bench world-stream``: the served world stream as a page sees it, against the model alone.

``livegen bench world-model`` times ``model.step`` in process; a page sees
more: scheduling, encoding, the socket, its own decoding and the flow-control
round trips. This bench runs both in one run, so the gap stays visible:

- model: ms per frame of ``model.step`` for one session, in this process
  (as ``bench world-model`` times it), measured before and after the served
  runs and medianed;
- served: ms per frame of one ``asap`` session over a real server (a
  ``livegen serve`` subprocess), read by a client that decodes every PNG and
  acks each chunk as it arrives, with ``max_chunks_ahead`` 4 so that the
  server, not the round trip, bounds the rate; the chunk headers' own
  ``model_ms`` and ``encode_ms`` medians say where that time went;
- realtime: 1, 2, 4, 8 page-like sessions at once (each level run once per
  ``--ack-at``, by default end then start, so the old page is the baseline) (``realtime`` pacing, PNG,
  ``max_chunks_ahead`` 1 by default), each with the page's player
  (``static/world.js``): a frame every 1/fps seconds while frames are queued,
  the cadence restarted after a stall, one stall counted each time a frame is
  half an interval overdue and none is there, the chunk acked when its last
  frame is shown (``--ack-at end``, the old page) or its first
  (``--ack-at start``, the pipelined ack). Each session changes its action
  every 0.3-0.7 s; input -> shown is from sending the event to showing the
  first frame of the chunk that applied it. Sessions open ``ARRIVAL_GAP_S``
  apart, and each plays ``--seconds``; fps and stalls per minute count
  after ``--warm-up`` seconds, over the sessions admitted (``refused`` counts
  those the server's frame-clock admission turned away; pass
  ``--server-arg=--world-realtime-headroom=0`` to play them all).

``--frames-per-chunk N`` (repeatable) serves the model with
``--world-frames-per-chunk N``: one server per length, all up at once, and
each level runs on each in turn, so 4 (the baseline) and 1 or 2 meet the same
load on a shared machine; each length gets its own model and served ms/frame.
``--world-workers N`` (repeatable) does the same for where the model runs: 0
in the server's process, N in N Ray actors (each its own process and core);
each length is served with each. The ``cpu`` column is the server's process
only: Ray's actors are not in it. ``--baseline-src DIR`` (a checkout of another
revision, e.g. ``git worktree add /tmp/old main``) serves each set-up a second
time from that checkout's ``src``, so today's admission and this code's meet
the same load in one run (the ``code`` column: ``this`` or ``baseline``).

Everything runs on the same machine as the server, so the figures include the
client's share of the CPU, as a browser's would.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import numpy as np
from PIL import Image

from livegen.protocol import world as wire

ACTIONS = ("left", "right", "up", "down")
#: Seconds between the sessions of a level opening, as users arrive: admission then sees the
#: batch the earlier ones made (all at once, it only knows a session stepped alone).
ARRIVAL_GAP_S = 0.25


# -- model alone -----------------------------------------------------------------------------
def model_ms_per_frame(model: Any, num_chunks: int) -> float:
    """Median ms per frame of ``model.step`` for one session (chunk 0 excluded), as world-model times it."""
    from livegen.models.world import Tick, TickMeta

    fpc = model.spec.frames_per_chunk
    seconds = []
    for chunk in range(num_chunks + 1):
        action = ACTIONS[(chunk // 3) % 4]
        meta = TickMeta("bench-stream", f"bench-stream-{chunk}", chunk, ())
        tick = Tick(meta=meta, seed=7, prompt="a forest room", controls={"action": {"action": action}})
        started = time.perf_counter()
        model.step([tick], None)
        seconds.append(time.perf_counter() - started)
    model.release("bench-stream")
    return float(1000 * statistics.median(seconds[1:]) / fpc)


# -- the server ------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_server(
    model_name: str, port: int, extra: list[str], src: Path | None = None
) -> subprocess.Popen[bytes]:
    """A ``livegen serve`` of this code, or of the checkout at ``src`` (its ``src`` folder)."""
    import livegen

    command = [sys.executable, "-m", "livegen", "serve", "--port", str(port), "--voice-model", "none"]
    command += ["--world-model", model_name, "--log-level", "warning", *extra]
    code = src / "src" if src is not None else Path(livegen.__file__).resolve().parents[1]
    server = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": str(code)})
    deadline = time.monotonic() + 120
    import httpx

    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise click.ClickException(f"the server exited with {server.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.terminate()
    raise click.ClickException("the server did not become ready")


# -- a page-like client ----------------------------------------------------------------------
@dataclass
class PageStats:
    frames: int = 0
    stalls: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    model_ms: list[float] = field(default_factory=list)
    encode_ms: list[float] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: Bytes received after the warm-up: headers' JSON and encoded frames.
    bytes: int = 0


def _decode_png(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


class Page:
    """One session played like the page plays it (see the module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        pacing: str,
        ahead: int,
        ack_at: str,
        seed: int,
        frames_per_chunk: int | None = None,
    ) -> None:
        self.url, self.pacing, self.ahead, self.ack_at, self.seed = url, pacing, ahead, ack_at, seed
        #: The chunk length the session asks for (``session.update``; the page asks for 1), or None.
        self.frames_per_chunk = frames_per_chunk
        self.stats = PageStats()
        self.queue: list[tuple[wire.ChunkHeader, list[np.ndarray]]] = []
        self.arrived = asyncio.Event()
        self.sent_at: dict[int, float] = {}
        self.counting_from = float("inf")
        self.fps = 16.0

    async def run(self, seconds: float, warm_up: float) -> PageStats:
        import websockets

        async with websockets.connect(self.url, max_size=16 * 1024 * 1024) as ws:
            session = {"seed": self.seed, "prompt": "a forest room", "pacing": self.pacing}
            session |= {"output": {"format": "png"}, "max_chunks_ahead": self.ahead}
            if self.frames_per_chunk is not None:
                session["frames_per_chunk"] = self.frames_per_chunk
            await ws.send(json.dumps({"type": "session.update", "session": session}))
            first = json.loads(await ws.recv())
            if first["type"] == "error":  # refused (e.g. realtime_capacity): counted, not played
                self.stats.errors.append(first["error"]["code"])
                return self.stats
            self.fps = float(first["session"]["fps"])
            started = time.perf_counter()
            self.counting_from = started + warm_up
            tasks = [asyncio.create_task(self._read(ws))]
            tasks.append(
                asyncio.create_task(self._play(ws) if self.pacing == "realtime" else self._drain(ws))
            )
            if self.pacing == "realtime":
                tasks.append(asyncio.create_task(self._steer(ws)))
            await asyncio.sleep(seconds)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return self.stats

    async def _read(self, ws: Any) -> None:
        while True:
            event = wire.decode_server(await ws.recv())
            if isinstance(event, wire.ChunkHeader):
                data = [await ws.recv() for _ in range(event.num_frames)]
                frames = [_decode_png(frame) for frame in data]
                now = time.perf_counter()
                if now >= self.counting_from:
                    self.stats.bytes += sum(len(frame) for frame in data) + len(wire.encode(event))
                    self.stats.arrivals.append(now)
                    self.stats.model_ms.append(event.timings.model_ms)
                    self.stats.encode_ms.append(event.timings.encode_ms)
                self.queue.append((event, frames))
                self.arrived.set()
            elif isinstance(event, wire.Error):
                self.stats.errors.append(event.error.code)

    async def _drain(self, ws: Any) -> None:
        """``asap``: take chunks as they come and ack each at once."""
        while True:
            await self.arrived.wait()
            self.arrived.clear()
            while self.queue:
                header, _ = self.queue.pop(0)
                await ws.send(json.dumps({"type": "chunk.ack", "chunk_index": header.chunk_index}))

    async def _play(self, ws: Any) -> None:
        interval = 1 / self.fps
        next_at, is_stalled, shown = 0.0, False, 0
        while True:
            now = time.perf_counter()
            if not self.queue:
                late_at = next_at + interval / 2
                if next_at > 0 and now > late_at and not is_stalled:
                    is_stalled = True
                    self.stats.stalls += now >= self.counting_from
                self.arrived.clear()
                timeout = max(0.001, late_at - now) if next_at > 0 and not is_stalled else None
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):  # wait_for (3.11) could swallow run's cancel
                        await self.arrived.wait()
                continue
            is_stalled = False
            if now < next_at:
                await asyncio.sleep(next_at - now)
                continue
            next_at = now + interval if now - next_at > interval else next_at + interval
            header, frames = self.queue[0]
            await self._show(ws, header, shown, len(frames), now)
            shown += 1
            if shown == len(frames):
                self.queue.pop(0)
                shown = 0

    async def _show(self, ws: Any, header: wire.ChunkHeader, index: int, num_frames: int, now: float) -> None:
        if now >= self.counting_from:
            self.stats.frames += 1
        if index == 0:
            for event_id in header.applied_event_ids:
                sent = self.sent_at.pop(event_id, None)
                if sent is not None and now >= self.counting_from:
                    self.stats.latencies_ms.append(1000 * (now - sent))
        ack_now = index == 0 if self.ack_at == "start" else index == num_frames - 1
        if ack_now:
            ack: dict[str, Any] = {"type": "chunk.ack", "chunk_index": header.chunk_index}
            if self.ack_at == "start":
                ack["at"] = "start"
            await ws.send(json.dumps(ack))

    async def _steer(self, ws: Any) -> None:
        rng = random.Random(self.seed)
        event_id = 0
        while True:
            await asyncio.sleep(rng.uniform(0.3, 0.7))
            event_id += 1
            control = {
                "track": "action",
                "schema": "livegen.action.v1",
                "data": {"action": rng.choice(ACTIONS)},
            }
            self.sent_at[event_id] = time.perf_counter()
            await ws.send(json.dumps({"type": "world.event", "event_id": event_id, "controls": [control]}))


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def served_ms_per_frame(url: str, seconds: float, fpc: int) -> dict[str, Any]:
    page = Page(url, pacing="asap", ahead=4, ack_at="end", seed=7)
    stats = await page.run(seconds, warm_up=1.0)
    gaps = [b - a for a, b in zip(stats.arrivals, stats.arrivals[1:], strict=False)]
    if not gaps:
        raise click.ClickException("the served session produced too few chunks to time")
    return {
        "ms_per_frame": 1000 * statistics.median(gaps) / fpc,
        "header_model_ms_per_frame": statistics.median(stats.model_ms) / fpc,
        "header_encode_ms_per_chunk": statistics.median(stats.encode_ms),
        "chunks": len(stats.arrivals),
    }


async def realtime_level(
    url: str, sessions: int, seconds: float, warm_up: float, ahead: int, ack_at: str, ask: int | None = None
) -> dict[str, Any]:
    pages = [
        Page(url, pacing="realtime", ahead=ahead, ack_at=ack_at, seed=100 + i, frames_per_chunk=ask)
        for i in range(sessions)
    ]

    async def arrive(index: int, page: Page) -> PageStats:
        await asyncio.sleep(index * ARRIVAL_GAP_S)
        return await page.run(seconds, warm_up)

    results = await asyncio.gather(*(arrive(i, page) for i, page in enumerate(pages)))
    counted_s = seconds - warm_up
    latencies = [ms for stats in results for ms in stats.latencies_ms]
    refused = sum("realtime_capacity" in stats.errors for stats in results)
    played = [stats for stats in results if "realtime_capacity" not in stats.errors] or results
    fps = [stats.frames / counted_s for stats in played]
    stalls = [60 * stats.stalls / counted_s for stats in played]
    return {
        "sessions": sessions,
        "refused": refused,
        "fps_min": round(min(fps), 2),
        "fps_median": round(statistics.median(fps), 2),
        "stalls_per_min_median": round(statistics.median(stalls), 1),
        "stalls_per_min_max": round(max(stalls), 1),
        "input_to_shown_p50_ms": _round(_percentile(latencies, 0.5)),
        "input_to_shown_p95_ms": _round(_percentile(latencies, 0.95)),
        "inputs_shown": len(latencies),
        "model_ms_per_chunk_median": _round(
            statistics.median([m for s in results for m in s.model_ms] or [0])
        ),
        "errors": sorted({code for stats in results for code in stats.errors}),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load_model(model_name: str, fpc: int | None) -> Any:
    """The model as the server loads it, in a registry of its own (one per chunk length)."""
    from livegen.models import default_registry

    return default_registry().load(model_name, {} if fpc is None else {"frames_per_chunk": fpc})


#: A served set-up: frames per chunk and world workers (None: the server's default for each), and
#: the checkout it serves from (None: this code; else ``--baseline-src``).
Setup = tuple[int | None, int | None, Path | None]


def _realtime_row(server: Any, url: str, sessions: int, mode: str, setup: Setup, args: Any) -> dict[str, Any]:
    seconds, warm_up, ahead, ask = args
    cpu_before, wall_before = _cpu_seconds(server.pid), time.perf_counter()
    level = asyncio.run(realtime_level(url, sessions, seconds, warm_up, ahead, mode, ask))
    row: dict[str, Any] = {"frames_per_chunk": setup[0], "world_workers": setup[1], "ack_at": mode, **level}
    row["code"] = _code(setup)
    row["session_frames_per_chunk"] = ask
    elapsed = time.perf_counter() - wall_before
    # The server's process only: with --world-workers the model's time is spent in Ray's actors.
    row["server_cpu_cores"] = round((_cpu_seconds(server.pid) - cpu_before) / elapsed, 2)
    row["health_realtime"] = _health_realtime(url)
    return row


def _health_realtime(url: str) -> Any:
    """What the server's ``/health`` says of its realtime capacity now (None where it says nothing)."""
    import httpx

    health_url = url.replace("ws://", "http://").replace("/v1/worlds", "/health")
    with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
        return httpx.get(health_url, timeout=5).json()["services"]["world"].get("realtime")
    return None


def _start_setup(model_name: str, setup: Setup, server_args: list[str]) -> tuple[Any, str]:
    """A server for one set-up, and its world URL."""
    port = _free_port()
    fpc, workers, src = setup
    extra = [] if fpc is None else ["--world-frames-per-chunk", str(fpc)]
    extra += [] if workers is None else ["--world-workers", str(workers)]
    server = start_server(model_name, port, [*server_args, *extra], src)
    return server, f"ws://127.0.0.1:{port}/v1/worlds"


def _code(setup: Setup) -> str:
    return "this" if setup[2] is None else "baseline"


def _run_summary(model: Any, model_ms: list[float], served: dict[str, Any]) -> dict[str, Any]:
    bench_ms = statistics.median(model_ms)
    return {
        "frames_per_chunk": model.spec.frames_per_chunk,
        "bench_ms_per_frame": round(bench_ms, 2),
        "bench_ms_per_frame_runs": [round(ms, 2) for ms in model_ms],
        "served": {k: round(v, 2) if isinstance(v, float) else v for k, v in served.items()},
        "served_over_bench": round(served["ms_per_frame"] / bench_ms, 3),
    }


def measure(
    model_name: str,
    levels: list[int],
    seconds: float,
    warm_up: float,
    ahead: int,
    ack_at: list[str],
    served_seconds: float,
    model_chunks: int,
    server_args: list[str],
    chunk_lengths: list[int | None] | None = None,
    worker_counts: list[int | None] | None = None,
    session_frames_per_chunk: int | None = None,
    baseline_src: Path | None = None,
) -> dict[str, Any]:
    """One server per set-up, a chunk length (``None``: the model's own) and a number of world
    workers (``None``: the server's default), all up at once; each level runs on each in turn, so
    that the set-ups meet the same load on a shared machine."""
    lengths = chunk_lengths or [None]
    sources = [None, baseline_src] if baseline_src is not None else [None]
    setups = [(fpc, w, src) for fpc in lengths for w in worker_counts or [None] for src in sources]
    models = {fpc: _load_model(model_name, fpc) for fpc in lengths}
    model_ms = {fpc: [model_ms_per_frame(model, model_chunks)] for fpc, model in models.items()}
    servers: dict[Setup, tuple[Any, str]] = {}
    try:
        for setup in setups:
            servers[setup] = _start_setup(model_name, setup, server_args)
        served = {}
        for setup, (_, url) in servers.items():
            fpc = setup[0]
            served[setup] = asyncio.run(
                served_ms_per_frame(url, served_seconds, models[fpc].spec.frames_per_chunk)
            )
            model_ms[fpc].append(model_ms_per_frame(models[fpc], model_chunks))
        rows = [
            _realtime_row(
                *servers[setup], n, mode, setup, (seconds, warm_up, ahead, session_frames_per_chunk)
            )
            for n in levels
            for mode in ack_at
            for setup in setups
        ]
        for fpc, model in models.items():
            model_ms[fpc].append(model_ms_per_frame(model, model_chunks))
    finally:
        for server, _ in servers.values():
            server.terminate()
        for server, _ in servers.values():
            server.wait(timeout=30)
    runs = [
        _run_summary(models[setup[0]], model_ms[setup[0]], served[setup])
        | {"world_workers": setup[1], "code": _code(setup)}
        for setup in setups
    ]
    for row in rows:
        row["frames_per_chunk"] = models[row["frames_per_chunk"]].spec.frames_per_chunk
    return {
        "benchmark": "world-stream",
        "model": model_name,
        "workload": {
            "seconds": seconds,
            "warm_up_s": warm_up,
            "max_chunks_ahead": ahead,
            "ack_at": ack_at,
            "format": "png",
            "session_frames_per_chunk": session_frames_per_chunk,
            "load_average": os.getloadavg()[0],
            "cpus": os.cpu_count(),
        },
        "runs": runs,
        "realtime": rows,
    }


@click.command("world-stream")
@click.option("--model", "model_name", default="tiny-world", show_default=True, help="World model to serve.")
@click.option("--levels", default="1,2,4,8", show_default=True, help="Concurrent realtime sessions to try.")
@click.option("--seconds", default=12.0, show_default=True, type=click.FloatRange(1), help="Per level.")
@click.option("--warm-up", default=3.0, show_default=True, type=click.FloatRange(0), help="Not counted.")
@click.option("--ahead", default=1, show_default=True, type=click.IntRange(1), help="max_chunks_ahead.")
@click.option(
    "--ack-at",
    type=click.Choice(["end", "start"]),
    multiple=True,
    default=("end", "start"),
    show_default=True,
    help="Ack a chunk when its last frame shows (the old page) or its first (pipelined); "
    "repeat for both: each level runs with each, in one run.",
)
@click.option(
    "--frames-per-chunk",
    "chunk_lengths",
    type=click.IntRange(1, 16),
    multiple=True,
    help="Serve with `--world-frames-per-chunk N` (repeatable: one server each, every level run on "
    "each in turn, e.g. 4 as the baseline and 1) [default: the model's own].",
)
@click.option(
    "--world-workers",
    "worker_counts",
    type=click.IntRange(0),
    multiple=True,
    help="Serve with `--world-workers N` (repeatable: one server each, e.g. 0, the model in the "
    "server's process, as the baseline and 2 Ray actors) [default: the server's default].",
)
@click.option(
    "--session-frames-per-chunk",
    type=click.IntRange(1, 16),
    default=None,
    help="Each realtime session asks for this chunk length in its session.update, as the page asks "
    "for 1 (docs/world-protocol.md) [default: none asked, the server's length].",
)
@click.option(
    "--baseline-src",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="Also serve every set-up from this checkout (its src/), e.g. main's in a scratch worktree: "
    "today's admission beside this code's, in one run (the code column).",
)
@click.option(
    "--webrtc",
    is_flag=True,
    help="Instead: each level over the WebSocket (PNG) and over WebRTC (/v1/worlds/calls, VP8) on one "
    "server: input -> shown, bytes/s per session, server CPU per frame, and the encoders' CPU per "
    "frame (bench/world_webrtc.py); e.g. --levels 1,4.",
)
@click.option("--busy-neighbour", is_flag=True, help="With --webrtc: a spinning process runs beside it all.")
@click.option("--served-seconds", default=6.0, show_default=True, type=click.FloatRange(2))
@click.option("--model-chunks", default=40, show_default=True, type=click.IntRange(2))
@click.option(
    "--server-arg", "server_args", multiple=True, help="Extra `livegen serve` argument (repeatable)."
)
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write the figures here."
)
def command(
    model_name: str,
    levels: str,
    seconds: float,
    warm_up: float,
    ahead: int,
    ack_at: tuple[str, ...],
    chunk_lengths: tuple[int, ...],
    worker_counts: tuple[int, ...],
    session_frames_per_chunk: int | None,
    baseline_src: Path | None,
    webrtc: bool,
    busy_neighbour: bool,
    served_seconds: float,
    model_chunks: int,
    server_args: tuple[str, ...],
    json_path: Path | None,
) -> None:
    """The served world stream as a page sees it (fps, stalls, input -> shown) vs the model's own speed."""
    if warm_up >= seconds:
        raise click.BadParameter("--warm-up must be shorter than --seconds")
    counts = [int(level) for level in levels.split(",") if level.strip()]
    if webrtc:
        from livegen.bench import world_webrtc

        ask = session_frames_per_chunk or 1  # the page's chunk length
        found = world_webrtc.measure(
            model_name, counts, seconds, warm_up, ask, list(server_args), busy_neighbour
        )
        world_webrtc.echo(found, click.echo)
        if json_path is not None:
            json_path.write_text(json.dumps(found, indent=2))
        return
    result = measure(
        model_name,
        counts,
        seconds,
        warm_up,
        ahead,
        list(ack_at),
        served_seconds,
        model_chunks,
        list(server_args),
        list(chunk_lengths) or None,
        list(worker_counts) or None,
        session_frames_per_chunk,
        baseline_src,
    )
    _echo(result, ahead)
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=2))


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _workers(count: int | None) -> str:
    if count is None:
        return "default workers"
    return "in process" if count == 0 else f"{count} Ray worker{'s' if count > 1 else ''}"


def _echo(result: dict[str, Any], ahead: int) -> None:
    for run in result["runs"]:
        served = run["served"]
        click.echo(
            f"{run['code']}: {run['frames_per_chunk']} frames/chunk, {_workers(run['world_workers'])}, "
            f"ms/frame: served "
            f"{served['ms_per_frame']:.2f} vs bench "
            f"{run['bench_ms_per_frame']:.2f} (x{run['served_over_bench']:.2f}); served chunks say model "
            f"{served['header_model_ms_per_frame']:.2f} ms/frame, encode "
            f"{served['header_encode_ms_per_chunk']:.2f} ms/chunk"
        )
    asked = result["workload"]["session_frames_per_chunk"]
    asks = "" if asked is None else f", each session asking for {asked} frame(s) a chunk"
    click.echo(f"realtime, {ahead} ahead{asks}:")
    click.echo(
        f"{'code':>9}{'f/chunk':>8}{'workers':>8}{'ack at':>7}{'sessions':>9}{'refused':>8}"
        f"{'fps min':>9}{'fps med':>9}"
        f"{'stalls/min':>11}{'p50 ms':>8}{'p95 ms':>8}{'cpu':>6}"
    )
    for row in result["realtime"]:
        click.echo(
            f"{row['code']:>9}{row['frames_per_chunk']:>8}{_fmt(row['world_workers']):>8}{row['ack_at']:>7}"
            f"{row['sessions']:>9}{row['refused']:>8}"
            f"{row['fps_min']:>9.2f}{row['fps_median']:>9.2f}{row['stalls_per_min_median']:>11.1f}"
            f"{_fmt(row['input_to_shown_p50_ms']):>8}{_fmt(row['input_to_shown_p95_ms']):>8}"
            f"{row['server_cpu_cores']:>6.2f}"
        )
