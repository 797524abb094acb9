"""``livegen bench voice-conversations --workers 1 --workers 2``: one server process or many.

The in-process bench serves the cascade from a server in the bench's own
process. This comparison starts, for each ``--workers N`` (in one run, side
by side), the server as ``livegen serve --workers N --voice-model cascade``
would (``cluster/supervisor.py``; started by ``voice_session_workers.started``,
which the voice-session comparison uses too), and runs the same levels of
conversations (``voice_conversations.level``) through its one port: the
kernel spreads the conversations over the processes. Each server process
loads the cascade (its recogniser, speech workers and end-of-turn model) and
sizes it as ``livegen serve`` does, from the machine's cores; the bench's
``--asr-batch`` and ``--vad`` set-ups do not apply.

For each N:

- ``levels``: the in-process bench's figures per level, with
  ``server_cpu_cores`` (every process of the server's tree together: server
  processes, their speech workers, the supervisor and Ray) and
  ``client_cpu_cores`` (this process: the users' side);
- ``max_conversations``: the largest level whose turn p95 stays under the goal;
- ``cpu_by_role``: the cores each kind of process of the tree used during the
  level: ``servers``, ``speech_service`` (the cluster's ``livegen-speech``
  actor: Whisper, Smart Turn, its Ray calls), ``speech_workers`` (Piper),
  ``ray_and_supervisor``; and ``speech_service``, the service's ``load``
  from ``/health`` after the level (its sizing; its queue's waits and its
  pieces' times over the run so far, the last 200 of each);
- memory: the RSS of each server process once ready and after the levels, and
  of the whole tree; ``memory_per_extra_process_mib`` against the first N.
  With the cascade, ``supervisor_and_ray_rss_mib`` (the tree less the server
  processes) holds each process's speech workers too, not only Ray's.

Every server is started before the first level, and each level is measured
on each server in turn, so that the servers compared at one level see the
same load on a shared machine. The questions are synthesised before any
server starts, by the cascade loaded here and closed again, so that its
threads do not share the machine with the servers'.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import click

from livegen.bench import voice_conversations as conversations
from livegen.bench import voice_session as single
from livegen.bench import voice_session_workers as compared
from livegen.bench.voice_turns import ServerTurns
from livegen.models.cascade.asr_batch import BatchStats

#: Seconds N server processes may take to load the cascade each, on a shared machine.
READY_WAIT_S = 600.0


def serve(port: int, workers: int) -> None:
    """The server of one comparison: ``livegen serve --workers N`` of the cascade."""
    compared.serve(port, workers, "cascade")


#: The roles of a server tree's processes, by what their command line names, for ``cpu_by_role``.
ROLES = (("speech_service", "SpeechService"), ("speech_workers", "tts_worker"))


def _cpu_by_process(server: compared.Started) -> dict[int, tuple[str, float]]:
    """Each process of the server's tree: its role and its CPU seconds so far."""
    found = {}
    for pid in compared._tree(server.root):
        with contextlib.suppress(OSError, IndexError, ValueError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            role = "servers" if pid in server.pids else "ray_and_supervisor"
            role = next((name for name, mark in ROLES if mark in argv), role)
            found[pid] = (role, single._cpu_seconds([pid]))
    return found


def _cpu_by_role(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], wall_s: float
) -> dict[str, float]:
    """Cores each role of the tree used between two readings (a process new since counts from 0)."""
    used: dict[str, float] = {}
    for pid, (role, seconds) in after.items():
        used[role] = used.get(role, 0.0) + seconds - before.get(pid, (role, 0.0))[1]
    return {role: round(seconds / wall_s, 2) for role, seconds in sorted(used.items())}


def _service_load(server: compared.Started) -> dict[str, Any] | None:
    """The cluster's speech service's ``load`` (its sizing, queue, pieces) from ``/health``."""
    if server.workers == 1:
        return None
    with contextlib.suppress(OSError, ValueError, KeyError):
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health", timeout=10) as reply:
            body = json.loads(reply.read())
        services = [s for s in body["cluster"]["services"] if s.get("name") == "livegen-speech"]
        load: dict[str, Any] | None = services[0].get("load") if services else None
        return load
    return None


def _level(
    server: compared.Started, questions: list[Any], num: int, options: dict[str, Any]
) -> dict[str, Any]:
    turns = ServerTurns(options["silence_ms"], f"ws://127.0.0.1:{server.port}")
    click.echo(f"{num} conversations on {server.workers} server processes", err=True)
    before, cpu, wall = _cpu_by_process(server), server.cpu_seconds(), time.perf_counter()
    args = (num, options["num_turns"], options["stagger_s"], BatchStats())
    row = asyncio.run(conversations.level(turns, questions, *args))
    wall_s = time.perf_counter() - wall
    row["server_cpu_cores"] = round((server.cpu_seconds() - cpu) / wall_s, 2)
    row["cpu_by_role"] = _cpu_by_role(before, _cpu_by_process(server), wall_s)
    row["client_cpu_cores"] = row.pop("cpu_cores")
    del row["asr"]  # the recognisers' queues are in the server processes (``speech_service``), not here
    row["speech_service"] = _service_load(server)
    return row


def compare(workers: tuple[int, ...], questions: list[Any], options: dict[str, Any]) -> dict[str, Any]:
    """Every ``--workers`` value's figures, side by side, and the ratios to the first: every server
    started at once, then each level measured on each in turn, so that the servers compared at one
    level see the same load on a shared machine."""
    load_at_start = list(os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        servers: list[compared.Started] = []
        for n in workers:
            out_dir = Path(tmp) / f"workers-{n}-{len(servers)}"
            out_dir.mkdir()
            servers.append(stack.enter_context(compared.started(__name__, n, out_dir, READY_WAIT_S)))
        runs: list[dict[str, Any]] = [{"workers": s.workers, **s.memory(), "levels": []} for s in servers]
        for num in options["counts"]:
            for server, run in zip(servers, runs, strict=True):
                run["levels"].append(_level(server, questions, num, options))
                time.sleep(conversations.SETTLE_S)
        for server, run in zip(servers, runs, strict=True):
            run["server_rss_mib_after"] = server.memory()["server_rss_mib"]
            run["max_conversations"] = conversations.max_conversations(run["levels"], options["p95_goal_ms"])
    compared.compare_to_first(runs, ("max_conversations",))
    return {
        "benchmark": "voice-conversations --workers",
        "machine": {"cpus": os.cpu_count(), "load_average_at_start": load_at_start},
        "settings": {key: options[key] for key in ("num_turns", "stagger_s", "silence_ms")},
        "p95_goal_ms": options["p95_goal_ms"],
        "runs": runs,
    }


def print_report(report: dict[str, Any]) -> None:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    goal = report["p95_goal_ms"]
    for run in report["runs"]:
        click.echo(f"\n{run['workers']} server processes, RSS {run['server_rss_mib']} MiB once ready")
        click.echo(
            f"{'convs':>6}{'turns':>6}{'p50 ms':>8}{'p95 ms':>8}{'stop p50':>9}{'heard p50':>10}"
            f"{'heard p95':>10}{'correct':>8}{'server cpu':>11}{'load':>6}  cpu by role"
        )
        for row in run["levels"]:
            stages = row["stages_ms"]
            roles = " ".join(f"{role}={cores:.2f}" for role, cores in row["cpu_by_role"].items())
            click.echo(
                f"{row['conversations']:>6}{row['turns']:>6}{ms(row['turn_p50_ms']):>8}{ms(row['turn_p95_ms']):>8}"
                f"{ms(stages['stopped_p50']):>9}{ms(stages['transcript_p50']):>10}{ms(stages['transcript_p95']):>10}"
                f"{row['correct_share']:>8.2f}{row['server_cpu_cores']:>11.2f}{row['machine_load']:>6.1f}"
                f"  {roles}"
            )
            if row["speech_service"]:
                click.echo(f"{'':>6}speech service: {row['speech_service']}")
        click.echo(f"max conversations with turn p95 < {goal:.0f} ms: {run['max_conversations']}")
