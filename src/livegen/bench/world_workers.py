"""``livegen bench world-workers``: world sessions stepped in Ray actors against in process, side by side.

The same sessions (seeds, ``asap`` pacing, auto-ack) run over the real server
twice in one process: once with the model in the server's process (the
baseline, ``--world-workers 0``) and once in ``--workers`` Ray actors on a
local Ray. Figures per run: chunks per second over all sessions (wall clock
from the first ``session.update`` to the last chunk), and the median of the
``model_ms`` each chunk header reports (for Ray: the round trip to the actor
and back, the price of leaving the process). Medians over ``--runs`` runs;
the ratio is Ray over in process, so above 1 means Ray is faster.

With a model as cheap as ``procedural-world`` this measures Ray's overhead;
Ray pays off when a step costs more than a round trip and the actors have
cores (or machines) of their own.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import click
from tqdm import tqdm

from livegen.client.world import WorldClient
from livegen.cluster.ray import import_ray
from livegen.server.config import ServerConfig
from livegen.server.thread import ServerThread


async def _session(url: str, seed: int, num_chunks: int, model_ms: list[float]) -> None:
    client = await WorldClient.connect(url)
    async with client:
        await client.create(seed=seed, pacing="asap", max_chunks_ahead=4)
        for _ in range(num_chunks):
            chunk = await client.next_chunk(wait_s=60)
            model_ms.append(chunk.header.timings.model_ms)
        await client.close()


async def _run(url: str, num_sessions: int, num_chunks: int) -> tuple[float, float]:
    """(chunks per second over all sessions, median model_ms per chunk)."""
    model_ms: list[float] = []
    started = time.perf_counter()
    await asyncio.gather(*(_session(url, seed, num_chunks, model_ms) for seed in range(num_sessions)))
    elapsed = time.perf_counter() - started
    return num_sessions * num_chunks / elapsed, statistics.median(model_ms)


def measure(
    model: str, num_workers: int, num_sessions: int, num_chunks: int, num_runs: int
) -> dict[str, Any]:
    ray = import_ray()
    ray.init(num_cpus=num_workers, include_dashboard=False, log_to_driver=False)
    base = ServerConfig(api_key=None, voice_model="none", world_model=model)
    on_ray = ServerConfig(api_key=None, voice_model="none", world_model=model, world_workers=num_workers)
    runs: dict[str, list[tuple[float, float]]] = {"in_process": [], "ray": []}
    try:
        with ServerThread(base) as local, ServerThread(on_ray) as remote:
            local.wait_ready()
            remote.wait_ready()
            for _ in tqdm(range(num_runs), desc="runs", unit="run"):
                runs["in_process"].append(asyncio.run(_run(local.ws_url, num_sessions, num_chunks)))
                runs["ray"].append(asyncio.run(_run(remote.ws_url, num_sessions, num_chunks)))
    finally:
        ray.shutdown()
    figures: dict[str, Any] = {
        "model": model,
        "workers": num_workers,
        "sessions": num_sessions,
        "chunks_per_session": num_chunks,
        "runs": num_runs,
    }
    for name, results in runs.items():
        figures[name] = {
            "chunks_per_s": statistics.median(r[0] for r in results),
            "model_ms": statistics.median(r[1] for r in results),
        }
    figures["ratio_chunks_per_s"] = figures["ray"]["chunks_per_s"] / figures["in_process"]["chunks_per_s"]
    return figures


@click.command("world-workers")
@click.option("--model", default="procedural-world", show_default=True, help="A world model name.")
@click.option(
    "--workers", "num_workers", default=2, show_default=True, type=click.IntRange(1), help="Ray actors."
)
@click.option(
    "--sessions", "num_sessions", default=4, show_default=True, type=click.IntRange(1), help="Sessions."
)
@click.option(
    "--chunks", "num_chunks", default=50, show_default=True, type=click.IntRange(1), help="Chunks each."
)
@click.option(
    "--runs", "num_runs", default=3, show_default=True, type=click.IntRange(1), help="Runs; medians reported."
)
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write the figures here."
)
def world_workers(
    model: str, num_workers: int, num_sessions: int, num_chunks: int, num_runs: int, json_path: Path | None
) -> None:
    """World sessions stepped in Ray actors against in process, on a local Ray (needs livegen[ray])."""
    figures = measure(model, num_workers, num_sessions, num_chunks, num_runs)
    local, remote = figures["in_process"], figures["ray"]
    click.echo(f"{'':22}{'in process':>12}{f'ray x{num_workers}':>12}{'ratio':>9}")
    ratio = figures["ratio_chunks_per_s"]
    click.echo(f"{'chunks/s':22}{local['chunks_per_s']:>12.1f}{remote['chunks_per_s']:>12.1f}{ratio:>9.2f}")
    click.echo(f"{'model_ms per chunk':22}{local['model_ms']:>12.3f}{remote['model_ms']:>12.3f}")
    click.echo(f"{num_sessions} sessions x {num_chunks} chunks of {model}; medians over {num_runs} runs")
    if json_path is not None:
        json_path.write_text(json.dumps(figures, indent=2))
