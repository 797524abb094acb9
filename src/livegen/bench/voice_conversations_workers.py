"""``livegen bench voice-conversations --workers 1 --workers 2``: one server process or many.

The in-process bench serves the cascade from a server in the bench's own
process. This comparison starts, for each ``--workers N`` (in one run, side
by side), the server as ``livegen serve --workers N --voice-model cascade``
would (``server/workers.py``; started by ``voice_session_workers.started``,
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
- memory: the RSS of each server process once ready and after the levels, and
  of the whole tree; ``memory_per_extra_process_mib`` against the first N.
  With the cascade, ``supervisor_and_ray_rss_mib`` (the tree less the server
  processes) holds each process's speech workers too, not only Ray's.

The questions are synthesised before any server starts, by the cascade
loaded here and closed again, so that its threads do not share the machine
with the servers'.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from livegen.bench import voice_conversations as conversations
from livegen.bench import voice_session_workers as compared
from livegen.bench.voice_turns import ServerTurns
from livegen.models.cascade.asr_batch import BatchStats

#: Seconds N server processes may take to load the cascade each, on a shared machine.
READY_WAIT_S = 600.0


def serve(port: int, workers: int) -> None:
    """The server of one comparison: ``livegen serve --workers N`` of the cascade."""
    compared.serve(port, workers, "cascade")


def _levels(server: compared.Started, questions: list[Any], options: dict[str, Any]) -> list[dict[str, Any]]:
    turns = ServerTurns(options["silence_ms"], f"ws://127.0.0.1:{server.port}")
    rows = []
    for num in options["counts"]:
        click.echo(f"{num} conversations on {server.workers} server processes", err=True)
        cpu, wall = server.cpu_seconds(), time.perf_counter()
        args = (num, options["num_turns"], options["stagger_s"], BatchStats())
        row = asyncio.run(conversations.level(turns, questions, *args))
        row["server_cpu_cores"] = round((server.cpu_seconds() - cpu) / (time.perf_counter() - wall), 2)
        row["client_cpu_cores"] = row.pop("cpu_cores")
        del row["asr"]  # the recognisers' queues are in the server processes, not here
        rows.append(row)
        time.sleep(conversations.SETTLE_S)
    return rows


def _one(workers: int, questions: list[Any], options: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    with compared.started(__name__, workers, out_dir, READY_WAIT_S) as server:
        report: dict[str, Any] = {"workers": workers, **server.memory()}
        report["levels"] = _levels(server, questions, options)
        report["server_rss_mib_after"] = server.memory()["server_rss_mib"]
        passing = [
            row["conversations"] for row in report["levels"] if row["turn_p95_ms"] < options["p95_goal_ms"]
        ]
        report["max_conversations"] = max(passing, default=0)
        return report


def compare(workers: tuple[int, ...], questions: list[Any], options: dict[str, Any]) -> dict[str, Any]:
    """Every ``--workers`` value's figures, side by side, and the ratios to the first."""
    load_at_start = list(os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        runs = [_one(n, questions, options, Path(tmp)) for n in workers]
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
            f"{'convs':>6}{'turns':>6}{'p50 ms':>8}{'p95 ms':>8}{'correct':>8}{'server cpu':>11}{'load':>6}"
        )
        for row in run["levels"]:
            click.echo(
                f"{row['conversations']:>6}{row['turns']:>6}{ms(row['turn_p50_ms']):>8}{ms(row['turn_p95_ms']):>8}"
                f"{row['correct_share']:>8.2f}{row['server_cpu_cores']:>11.2f}{row['machine_load']:>6.1f}"
            )
        click.echo(f"max conversations with turn p95 < {goal:.0f} ms: {run['max_conversations']}")
