"""``livegen bench voice-session``: how many realtime voice sessions one core holds.

One server process, pinned to one core, serves a bench-internal tone model
(it takes audio and answers each response with a tone; it is never in
CATALOG). Client sessions in this process, pinned to another core when there
is one, each stream 20 ms appends in real time, and every two seconds commit
and ask for a response. For each load level the bench reports:

- the latency from a client's append to the model receiving it (p50, p99),
  matched append by append: the model records when each append reached it,
  and appends reach it in wire order;
- events per second per core: wire events both ways over the server's CPU
  seconds;
- memory per idle session: the server's RSS growth over idle sessions;
- ``sessions_per_core``: the largest level whose p99 stays under 10 ms (the
  median of ``--runs`` runs of the level).

The clients are lean, because they share the machine with the server (the
``--workers`` comparison runs both unpinned on the same cores): every session
sends the same three messages, encoded once (the append's base64 and JSON are
not redone per send; the bytes go out as text frames, so the server receives
exactly what a per-send encoding would give it), and received events are
counted without being decoded. ``client_cpu_seconds`` says what they cost.

Sessions start streaming together once all are connected, each at its own
phase: spread evenly over the 20 ms append period and the 2 s turn period, as
independent users are (no two users end their turns in the same instant).
``--aligned`` starts them all at the same phase instead, the worst case: every
append of a period and every turn end arrive in one burst.

The baseline is the same measurement with one session, in the same run; the
report gives each level's p99 as a ratio to it.

``--ws`` picks uvicorn's WebSocket implementation for the server (``auto``,
which is ``websockets-sansio`` when ``websockets`` is installed, or ``websockets`` or
``wsproto``), to compare what each costs per event.

``--neighbour SHARE`` measures every level a second time, in the same run,
with a CPU-busy neighbour process pinned to the server's core, busy for SHARE
of each 10 ms (1.0: always runnable), as when another program on the machine
wakes up: ``levels_with_neighbour`` and ``sessions_per_core_with_neighbour``
sit next to the quiet figures, so the two can be compared directly.
``--neighbour-on clients`` pins it to the clients' core instead: a program
busy elsewhere on the machine, which the server feels only through shared
caches, memory and the kernel, and through clients that send late.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import click
import numpy as np

from livegen.models.voice import ModelHealth, OutputKind, ResponseRequest, StreamConfig, VoiceOutput

APPEND_MS = 20
RATE = 24_000
P99_GOAL_MS = 10.0
WARMUP_APPENDS = 10
APPENDS_PER_TURN = 100
#: The share of its core a server can use and still keep queues short enough for the p99 goal.
UTILISATION_FOR_GOAL = 0.7


# --- the tone model (bench-internal) ----------------------------------------------------


class ToneStream:
    def __init__(self, session_id: str, out_dir: Path) -> None:
        self.session_id = session_id
        self.out_dir = out_dir
        self.arrivals: list[float] = []
        self.queue: asyncio.Queue[VoiceOutput | None] = asyncio.Queue()
        self.tone = (np.sin(np.arange(RATE // 10) * 2 * np.pi * 440 / RATE) * 6000).astype("<i2").tobytes()

    async def append(self, epoch: int, pcm: bytes) -> None:
        self.arrivals.append(time.time())

    async def commit(self, epoch: int, item_id: str) -> None:
        await self.queue.put(VoiceOutput(OutputKind.TRANSCRIPT_DONE, epoch, item_id=item_id, text="tone"))

    async def clear(self, epoch: int) -> None:
        return None

    async def respond(self, epoch: int, request: ResponseRequest) -> None:
        rid = request.response_id
        for _ in range(5):  # 500 ms of tone, paced out by the session
            await self.queue.put(VoiceOutput(OutputKind.AUDIO_DELTA, epoch, response_id=rid, audio=self.tone))
        await self.queue.put(
            VoiceOutput(OutputKind.RESPONSE_DONE, epoch, response_id=rid, status="completed")
        )

    async def cancel(self, epoch: int) -> None:
        return None

    async def update(self, config: StreamConfig) -> None:
        return None

    async def outputs(self) -> AsyncIterator[VoiceOutput]:
        while (output := await self.queue.get()) is not None:
            yield output

    async def aclose(self) -> None:
        partial = self.out_dir / f"{self.session_id}.part"
        partial.write_text(json.dumps(self.arrivals))
        partial.rename(self.out_dir / f"{self.session_id}.json")  # readers never see half a file
        await self.queue.put(None)


class ToneModel:
    name = "bench-tone"
    input_rate = RATE
    output_rate = RATE
    has_vad = False

    def __init__(self) -> None:
        self.out_dir = Path(os.environ["LIVEGEN_BENCH_OUT"])

    async def open(self, session_id: str, config: StreamConfig) -> ToneStream:
        return ToneStream(session_id, self.out_dir)

    def health(self) -> ModelHealth:
        return ModelHealth()


def load_tone() -> ToneModel:
    return ToneModel()


def _serve(port: int, cpu: int | None, niceness: int, ws: str) -> None:
    """The server process: pinned, quiet, serving only the tone model."""
    import uvicorn

    from livegen.models import Kind, ModelInfo, Registry
    from livegen.server import ServerConfig, create_app

    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    if niceness:
        try:
            os.nice(niceness)
        except PermissionError:
            print(f"bench: cannot change the server's niceness by {niceness} (needs root)", file=sys.stderr)
    registry = Registry(
        [ModelInfo("bench-tone", Kind.VOICE, "livegen.bench.voice_session:load_tone", "bench")]
    )
    config = ServerConfig(  # the bench's levels, not the defaults, bound sessions and sockets
        api_key=None,
        voice_model="bench-tone",
        world_model="none",
        max_sessions=100_000,
        max_connections=100_000,
    )
    app = create_app(config, registry)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", log_config=None, ws=ws)


# --- the clients ------------------------------------------------------------------------


def _silence_append() -> bytes:
    audio = base64.b64encode(bytes(RATE * APPEND_MS // 1000 * 2)).decode()
    return json.dumps({"type": "input_audio_buffer.append", "audio": audio}).encode()


#: Every session's messages, encoded once (UTF-8 JSON, sent as text frames): the clients share
#: the machine with the server, and each byte they spend re-encoding is one the server lacks.
APPEND_MESSAGE = _silence_append()
COMMIT_MESSAGE = b'{"type":"input_audio_buffer.commit"}'
RESPONSE_MESSAGE = b'{"type":"response.create"}'


async def _client(
    url: str,
    seconds: float,
    sends: dict[str, list[float]],
    counts: list[int],
    phase: float,
    connected: asyncio.Barrier,
) -> None:
    """One session: connect, wait for every session to be connected, then stream from ``phase``
    (0..1) of the append period on and end its turns ``phase`` of the way into each turn period."""
    import websockets

    async with websockets.connect(url, max_size=None, compression=None, open_timeout=120) as ws:
        created = json.loads(await ws.recv())
        session_id = created["session"]["id"]
        await ws.send(
            json.dumps({"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}})
        )
        times: list[float] = []
        sends[session_id] = times

        async def read() -> None:
            with contextlib.suppress(websockets.ConnectionClosed):
                while True:
                    await ws.recv(decode=False)  # counted, never read: no UTF-8 decode
                    counts[1] += 1

        reader = asyncio.create_task(read())
        loop = asyncio.get_running_loop()
        await connected.wait()
        start = loop.time() + phase * APPEND_MS / 1000
        turn_end = int(phase * APPENDS_PER_TURN) % APPENDS_PER_TURN
        num_appends = int(seconds * 1000 / APPEND_MS)
        for index in range(num_appends):
            await asyncio.sleep(max(0.0, start + index * APPEND_MS / 1000 - loop.time()))
            times.append(time.time())
            await ws.send(APPEND_MESSAGE, text=True)
            counts[0] += 1
            if index % APPENDS_PER_TURN == turn_end:  # every 2 s: end the turn and ask for a tone
                await ws.send(COMMIT_MESSAGE, text=True)
                await ws.send(RESPONSE_MESSAGE, text=True)
                counts[0] += 2
        await asyncio.sleep(0.7)
        reader.cancel()


async def _idle(url: str, opened: asyncio.Event, release: asyncio.Event) -> None:
    import websockets

    async with websockets.connect(url, open_timeout=120) as ws:
        await ws.recv()
        opened.set()
        await release.wait()


def _real_time_ratio(sends: dict[str, list[float]]) -> float:
    ratios = [
        (len(t) - 1) * APPEND_MS / 1000 / (t[-1] - t[0])
        for t in sends.values()
        if len(t) > 1 and t[-1] > t[0]
    ]
    return statistics.median(ratios) if ratios else float("nan")


def _clean(out_dir: Path) -> None:
    for stale in out_dir.glob("*.json"):
        stale.unlink()


def _collect(out_dir: Path, session_ids: list[str], timeout: float = 10.0) -> dict[str, list[float]]:
    """Each session's model-side arrival times, written when its stream closed."""
    deadline = time.monotonic() + timeout
    paths = {sid: out_dir / f"{sid}.json" for sid in session_ids}
    while not all(p.exists() for p in paths.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return {sid: json.loads(p.read_text()) for sid, p in paths.items() if p.exists()}


def _cpu_seconds(pids: list[int]) -> float:
    """User and system CPU seconds of the server's processes, together."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _rss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


async def _level(
    url: str, pids: list[int], out_dir: Path, num_sessions: int, seconds: float, aligned: bool
) -> dict[str, Any]:
    await asyncio.to_thread(_clean, out_dir)
    sends: dict[str, list[float]] = {}
    counts = [0, 0]
    connected = asyncio.Barrier(num_sessions)
    phases = [0.0 if aligned else i / num_sessions for i in range(num_sessions)]
    cpu_before, wall_before = _cpu_seconds(pids), time.monotonic()
    client_cpu_before = time.process_time()
    await asyncio.gather(*(_client(url, seconds, sends, counts, p, connected) for p in phases))
    cpu = _cpu_seconds(pids) - cpu_before
    client_cpu = time.process_time() - client_cpu_before
    wall = time.monotonic() - wall_before
    arrivals = await asyncio.to_thread(_collect, out_dir, list(sends))
    latencies: list[float] = []
    for session_id, sent in sends.items():
        arrived = arrivals.get(session_id, [])
        # The first appends of a session pay for its warm-up (first resampler, first chain task).
        latencies += [(a - s) * 1000 for s, a in list(zip(sent, arrived, strict=False))[WARMUP_APPENDS:]]
    events = counts[0] + counts[1]
    return {
        "sessions": num_sessions,
        "seconds": round(wall, 2),
        "appends": len(latencies),
        # 1.0: clients kept real time; less means the client side fell behind (the load was lighter).
        "append_rate_vs_real_time": round(_real_time_ratio(sends), 3),
        "append_to_model_ms": {
            "p50": round(_percentile(latencies, 50), 3),
            "p99": round(_percentile(latencies, 99), 3),
            "median": round(statistics.median(latencies), 3) if latencies else None,
        },
        "events": events,
        "server_cpu_seconds": round(cpu, 2),
        "server_cpu_utilisation": round(cpu / wall, 3),
        "events_per_second_per_core": round(events / cpu, 1) if cpu else None,
        # What the clients themselves cost (this process): on one machine it is the server's loss.
        "client_cpu_seconds": round(client_cpu, 2),
    }


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One level's figures over its runs: the run of median p99, with every run's p99 beside it
    (one noisy run on a shared machine must not decide sessions_per_core)."""
    ordered = sorted(runs, key=lambda run: run["append_to_model_ms"]["p99"])
    return {
        **ordered[(len(ordered) - 1) // 2],
        "p99_of_each_run": [r["append_to_model_ms"]["p99"] for r in runs],
    }


async def _memory_per_idle_session(url: str, pids: list[int], num_sessions: int) -> float:
    await asyncio.sleep(0.5)
    before = _rss_kib(pids)
    release = asyncio.Event()
    events = [asyncio.Event() for _ in range(num_sessions)]
    tasks = [asyncio.create_task(_idle(url, e, release)) for e in events]
    for event in events:
        await event.wait()
    await asyncio.sleep(0.5)
    after = _rss_kib(pids)
    release.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return (after - before) / num_sessions


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@click.command("voice-session")
@click.option(
    "--levels", default="1,25,50,100,200,300", show_default=True, help="Session counts to try, in order."
)
@click.option("--seconds", default=6.0, show_default=True, help="Streaming time per level.")
@click.option("--idle-sessions", default=200, show_default=True, help="Idle sessions for the memory figure.")
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the report here."
)
@click.option(
    "--nice",
    "niceness",
    default=0,
    show_default=True,
    help="Niceness change for the server process; negative (root only) shields it from neighbours "
    "on a shared machine, so the figures measure livegen rather than the other load.",
)
@click.option(
    "--aligned",
    is_flag=True,
    help="Start every session's appends and turn ends at the same instant (the worst case) instead "
    "of spreading them evenly over the 20 ms append and 2 s turn periods, as independent users are.",
)
@click.option(
    "--runs", default=3, show_default=True, type=click.IntRange(1), help="Runs per level; the median counts."
)
@click.option(
    "--neighbour",
    default=0.0,
    show_default=True,
    type=click.FloatRange(0, 1),
    help="Also measure every level with a CPU-busy process, busy this share of the time "
    "(0: no neighbour run).",
)
@click.option(
    "--neighbour-on",
    default="server",
    show_default=True,
    type=click.Choice(["server", "clients"]),
    help="The core the neighbour is pinned to: the server's (it takes the server's time) or the "
    "clients' (the other core, as a program elsewhere on the machine).",
)
@click.option(
    "--ws",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "websockets", "websockets-sansio", "wsproto"]),
    help="The server's WebSocket implementation (uvicorn's ws option), to compare their cost.",
)
@click.option(
    "--workers",
    multiple=True,
    type=click.IntRange(1, 64),
    help="Compare servers of this many processes (repeatable: --workers 1 --workers 2), side by side "
    "in one run, unpinned: sessions per machine (bench/voice_session_workers.py).",
)
@click.option(
    "--busy-neighbour",
    is_flag=True,
    help="With --workers: measure every level again beside an unpinned process spinning on the CPU.",
)
@click.option("--serve", "serve_port", type=int, default=None, hidden=True)
@click.option("--cpu", type=int, default=None, hidden=True)
def voice_session(
    levels: str,
    seconds: float,
    idle_sessions: int,
    json_path: str | None,
    niceness: int,
    aligned: bool,
    runs: int,
    neighbour: float,
    neighbour_on: str,
    ws: str,
    workers: tuple[int, ...],
    busy_neighbour: bool,
    serve_port: int | None,
    cpu: int | None,
) -> None:
    """N concurrent voice sessions streaming 20 ms appends in real time to one pinned server core."""
    if workers:
        from livegen.bench import voice_session_workers

        options = {"levels": levels, "seconds": seconds, "idle_sessions": idle_sessions, "runs": runs}
        report = voice_session_workers.compare(workers, {**options, "busy_neighbour": busy_neighbour})
        _write(report, json_path)
        return
    if serve_port is not None:
        _serve(serve_port, cpu, niceness, ws)
        return
    from tqdm import tqdm

    cores = sorted(os.sched_getaffinity(0))
    server_cpu, client_cpus = cores[0], set(cores[1:]) or {cores[0]}
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "LIVEGEN_BENCH_OUT": tmp}
        command = [
            sys.executable,
            "-m",
            "livegen",
            "bench",
            "voice-session",
            "--serve",
            str(port),
            "--cpu",
            str(server_cpu),
            "--nice",
            str(niceness),
            "--ws",
            ws,
        ]
        server = subprocess.Popen(command, env=env)
        priority = os.getpriority(os.PRIO_PROCESS, 0)
        try:
            _wait_healthy(port)
            os.sched_setaffinity(0, client_cpus)
            with contextlib.suppress(PermissionError):  # the clients keep real time under the same shield
                os.setpriority(os.PRIO_PROCESS, 0, priority + niceness)
            report = asyncio.run(
                _measure(port, [server.pid], Path(tmp), levels, seconds, idle_sessions, aligned, runs, tqdm)
            )
            if neighbour > 0:
                neighbour_cpu = server_cpu if neighbour_on == "server" else min(client_cpus)
                with _neighbour(neighbour_cpu, neighbour):
                    busy = asyncio.run(
                        _measure(port, [server.pid], Path(tmp), levels, seconds, 0, aligned, runs, tqdm)
                    )
                report["neighbour_share"] = neighbour
                report["neighbour_cpu"] = neighbour_cpu
                report["levels_with_neighbour"] = busy["levels"]
                report["sessions_per_core_with_neighbour"] = busy["sessions_per_core"]
        finally:
            os.sched_setaffinity(0, cores)
            with contextlib.suppress(PermissionError):
                os.setpriority(os.PRIO_PROCESS, 0, priority)
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    report["server_cpu"] = server_cpu
    report["server_niceness_change"] = niceness
    report["ws"] = ws
    report["client_cpus"] = sorted(client_cpus)
    _write(report, json_path)


def _write(report: dict[str, Any], json_path: str | None) -> None:
    text = json.dumps(report, indent=2)
    click.echo(text)
    if json_path:
        Path(json_path).write_text(text + "\n")


#: The neighbour: busy for ``share`` of every 10 ms, on one core, until killed.
_NEIGHBOUR = """
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
share = float(sys.argv[2])
while True:
    started = time.perf_counter()
    while time.perf_counter() - started < 0.01 * share:
        pass
    if share < 1:
        time.sleep(0.01 * (1 - share))
"""


@contextlib.contextmanager
def _neighbour(cpu: int, share: float) -> Any:
    """A CPU-busy process on ``cpu`` for the duration of the block."""
    process = subprocess.Popen([sys.executable, "-c", _NEIGHBOUR, str(cpu), str(share)])
    try:
        yield process
    finally:
        process.kill()
        process.wait(10)


def _wait_healthy(port: int) -> None:
    """Poll /health with the standard library (the bench needs no HTTP client package)."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        url = f"http://127.0.0.1:{port}/health"
        with (
            contextlib.suppress(urllib.error.URLError, ConnectionError),
            urllib.request.urlopen(url) as answer,
        ):
            if answer.status == 200:  # a 503 while loading raises HTTPError, a URLError
                return
        time.sleep(0.1)
    raise click.ClickException("the bench server did not become ready")


async def _measure(
    port: int,
    pids: list[int],
    out_dir: Path,
    levels: str,
    seconds: float,
    idle_sessions: int,
    aligned: bool,
    runs: int,
    tqdm: Any,
) -> dict[str, Any]:
    url = f"ws://127.0.0.1:{port}/v1/realtime"
    # Memory first, while the process has not yet grown pools that idle sessions could reuse.
    memory = await _memory_per_idle_session(url, pids, idle_sessions) if idle_sessions else 0.0
    results = []
    counts = [int(n) for n in levels.split(",") if n.strip()]
    for num_sessions in tqdm(counts, desc="voice-session levels", unit="level"):
        runs_of_level = [
            await _level(url, pids, out_dir, num_sessions, seconds, aligned) for _ in range(runs)
        ]
        results.append(_median_run(runs_of_level))
    baseline = results[0]["append_to_model_ms"]["p99"]
    for result in results:
        result["p99_ratio_to_baseline"] = (
            round(result["append_to_model_ms"]["p99"] / baseline, 2) if baseline else None
        )
    passing = [r["sessions"] for r in results if r["append_to_model_ms"]["p99"] < P99_GOAL_MS]
    busiest = results[-1]
    per_session = busiest["events"] / busiest["sessions"] / seconds  # wire events per session-second
    return {
        "bench": "voice-session",
        "append_ms": APPEND_MS,
        "phases": "aligned" if aligned else "spread",
        "runs_per_level": runs,
        "p99_goal_ms": P99_GOAL_MS,
        "baseline_sessions": counts[0],
        "levels": results,
        "sessions_per_core": max(passing, default=0),
        # What one whole core would hold at the measured cost per event (an estimate: the
        # measured figure above depends on how much of its core the server actually got).
        "sessions_per_core_cpu_bound_estimate": int(
            UTILISATION_FOR_GOAL * busiest["events_per_second_per_core"] / per_session
        ),
        "memory_per_idle_session_kib": round(memory, 1),
    }
