"""``livegen bench voice-session --workers 1 --workers 2``: sessions per machine, one process or many.

The one-process bench pins its server to one core and asks how many sessions
a core holds. This comparison asks how many a *machine* holds, so nothing is
pinned: for each ``--workers N`` (in one run, side by side) it starts the
server as ``livegen serve --workers N`` would (``cluster/supervisor.py``: N=1 is
one process without Ray; N>1 a supervisor, a local Ray and N processes on one
port), serving the bench's tone model, and runs the same levels through the
shared port (the kernel spreads the sessions over the processes). For each N:

- ``levels``: the one-process bench's figures per level, with the CPU of all
  the server processes together;
- ``sessions_per_machine``: the largest level whose p99 append-to-model
  latency stays under 10 ms;
- memory: the RSS of each server process once ready, and of the whole process
  tree; ``supervisor_and_ray_rss_mib`` is the fixed cost of many processes (the
  supervisor and Ray's own processes), ``memory_per_extra_process_mib`` what
  each server process adds (its Ray driver included), against the first N;
- with ``--busy-neighbour``, every level again beside a process that spins on
  the CPU unpinned (``python -c 'while True: pass'``), in the same run.

The clients run in this process; they are part of the machine's load, as they
are in any one-machine measurement (a real deployment's clients are elsewhere).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from livegen.bench import voice_session as single


def tone_registry() -> Any:
    from livegen.models import Kind, ModelInfo, Registry

    return Registry([ModelInfo("bench-tone", Kind.VOICE, "livegen.bench.voice_session:load_tone", "bench")])


def serve(port: int, workers: int, voice_model: str = "bench-tone") -> None:
    """The server of one comparison: ``livegen serve --workers N`` of ``voice_model`` (the bench's
    tone model, or one of the default registry's), without limits of its own."""
    from livegen.cluster.supervisor import run
    from livegen.server.config import ServerConfig

    config = ServerConfig(
        api_key=None,
        port=port,
        voice_model=voice_model,
        world_model="none",
        max_sessions=100_000,
        max_connections=100_000,
        log_level="warning",
        workers=workers,
    )
    run(config, f"{__name__}:tone_registry" if voice_model == "bench-tone" else None)


def _health(port: int) -> dict[str, Any] | None:
    with (
        contextlib.suppress(OSError, ValueError),
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health") as answer,
    ):
        body: dict[str, Any] = json.loads(answer.read())
        return body
    return None


def _server_pids(port: int, process: subprocess.Popen[bytes], workers: int, wait_s: float) -> list[int]:
    """The pids of the processes that serve sessions, once all are ready."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        body = _health(port)
        if body is not None and workers == 1:
            return [process.pid]
        if body is not None and len(processes := body.get("cluster", {}).get("processes", [])) == workers:
            return [int(p["pid"]) for p in processes]
        if process.poll() is not None:
            break
        time.sleep(0.3)
    raise click.ClickException(f"the bench server of {workers} processes did not become ready")


def _tree(root: int) -> list[int]:
    """``root`` and every process under it (Ray's own processes are the supervisor's children)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += parents.get(pid, [])
    return found


def _tree_rss_kib(root: int) -> int:
    total = 0
    for pid in _tree(root):
        with contextlib.suppress(OSError):
            total += single._rss_kib([pid])
    return total


@contextlib.contextmanager
def busy_neighbour() -> Iterator[None]:
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        process.kill()
        process.wait(10)


@dataclasses.dataclass
class Started:
    """A bench server of ``workers`` processes, started by ``started``."""

    workers: int
    port: int
    root: int  # the process started here: the server, or the supervisor of N and Ray
    pids: list[int]  # the processes that serve sessions

    def memory(self) -> dict[str, Any]:
        """RSS of each server process and of the whole tree; the rest is the supervisor and Ray."""
        servers = [round(single._rss_kib([pid]) / 1024, 1) for pid in self.pids]
        tree = round(_tree_rss_kib(self.root) / 1024, 1)
        return {
            "server_rss_mib": servers,
            "tree_rss_mib": tree,
            "supervisor_and_ray_rss_mib": round(tree - sum(servers), 1),
        }

    def cpu_seconds(self) -> float:
        """CPU seconds of every process in the tree (the servers' own helpers and Ray's included)."""
        total = 0.0
        for pid in _tree(self.root):
            with contextlib.suppress(OSError, IndexError, ValueError):
                total += single._cpu_seconds([pid])
        return total


@contextlib.contextmanager
def started(serve_module: str, workers: int, out_dir: Path, ready_wait_s: float = 180.0) -> Iterator[Started]:
    """``serve_module``'s ``serve(port, workers)`` in a process group of its own, ended on exit."""
    port = single._free_port()
    env = {**os.environ, "LIVEGEN_BENCH_OUT": str(out_dir)}
    command = [sys.executable, "-c", f"from {serve_module} import serve; serve({port}, {workers})"]
    process = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        pids = _server_pids(port, process, workers, ready_wait_s)
        time.sleep(1.0)
        yield Started(workers, port, process.pid, pids)
    finally:
        # The server (or the supervisor) stops what it started, as on a SIGTERM in production; the
        # whole group only if it does not (a SIGTERM to every process would kill the speech
        # workers under a server that is still up, and it would restart them).
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 9)
        process.wait()


def _one(workers: int, options: dict[str, Any], out_dir: Path, tqdm: Any) -> dict[str, Any]:
    with started(__name__, workers, out_dir) as server:
        port, pids = server.port, server.pids
        report: dict[str, Any] = {"workers": workers, **server.memory()}
        measure = (options["levels"], options["seconds"], options["idle_sessions"], False, options["runs"])
        quiet = asyncio.run(single._measure(port, pids, out_dir, *measure, tqdm))
        report.update(_summary(quiet))
        if options["busy_neighbour"]:
            with busy_neighbour():
                busy_measure = (options["levels"], options["seconds"], 0, False, options["runs"])
                busy = asyncio.run(single._measure(port, pids, out_dir, *busy_measure, tqdm))
            report["levels_with_busy_neighbour"] = busy["levels"]
            report["sessions_per_machine_with_busy_neighbour"] = busy["sessions_per_core"]
        return report


def _summary(measured: dict[str, Any]) -> dict[str, Any]:
    return {
        "levels": measured["levels"],
        "sessions_per_machine": measured["sessions_per_core"],
        "memory_per_idle_session_kib": measured["memory_per_idle_session_kib"],
    }


def compare_to_first(runs: list[dict[str, Any]], figures: tuple[str, ...]) -> None:
    """Each later run's memory per extra server process, and its ``figures`` as ratios to the first."""
    base = runs[0]
    for run in runs[1:]:
        extra = run["workers"] - base["workers"]
        servers = sum(run["server_rss_mib"]) - sum(base["server_rss_mib"])
        if extra:
            run["memory_per_extra_process_mib"] = round(servers / extra, 1)
        for key in figures:
            if base.get(key) and key in run:
                run[f"{key}_ratio_to_first"] = round(run[key] / base[key], 2)


def compare(workers: tuple[int, ...], options: dict[str, Any]) -> dict[str, Any]:
    """Every ``--workers`` value's figures, side by side, and the ratios to the first."""
    from tqdm import tqdm

    with tempfile.TemporaryDirectory() as tmp:
        runs = [_one(n, options, Path(tmp), tqdm) for n in workers]
    compare_to_first(runs, ("sessions_per_machine", "sessions_per_machine_with_busy_neighbour"))
    return {
        "bench": "voice-session --workers",
        "p99_goal_ms": single.P99_GOAL_MS,
        "cores": len(os.sched_getaffinity(0)),
        "load_average_at_start": os.getloadavg(),
        "runs": runs,
    }
