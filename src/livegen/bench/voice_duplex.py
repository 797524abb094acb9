"""``livegen bench voice-lockstep`` (once ``voice-duplex``): native full-duplex sessions held in lockstep.

For each batch size it opens that many sessions (each its own seed and its own noise input), steps
them together for ``--steps`` frames after a warm-up, and reports the step time's median, p95 and
p99 against the frame period (80 ms for Moshi), the GPU memory torch has held by then (on a GPU),
and the CPU time this process spent per step (its own cost, which a busy machine stretches in wall
time but not in CPU time). A batch is held at the
frame clock with no missed frame when its p95 step is under the frame period; ``sessions_held`` is
the largest such batch.

First audio after a session opens is the model's own: Moshi's acoustic codes run one frame late,
so its first sound comes out of the step on the session's second input frame, which is complete
two frame periods after the session starts talking: ``first_audio_ms`` = 2 frame periods + opening
the slot + that step (batch 1, median).

``--geometry 7b`` builds random weights in Moshi 7B's geometry (bfloat16 on a GPU): the speed of the
real model without its weights. ``scripts/device/check.sh`` runs it on a GPU machine.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import click


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))]


def _noise_frames(seed: int, count: int, samples: int) -> list[bytes]:
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.normal(0, 3000, samples).clip(-32768, 32767).astype("<i2").tobytes() for _ in range(count)]


def _build(geometry: str, max_sessions: int, device: str, dtype: str) -> Any:
    import torch

    from livegen.models.moshi.loader import build_seven_b, build_tiny

    target = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    chosen = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
    if chosen is None:
        chosen = torch.bfloat16 if target.startswith("cuda") else torch.float32
    if geometry == "7b":
        return build_seven_b(max_sessions, chosen, target)
    return build_tiny_on(build_tiny(max_sessions), target, chosen)


def build_tiny_on(model: Any, device: str, dtype: Any) -> Any:
    """moshi-tiny rebuilt on ``device``/``dtype`` (its pools are allocated where its weights are)."""
    from livegen.models.moshi.loader import TINY_DESCRIPTION
    from livegen.models.moshi.model import MoshiLockstep

    if str(model.device) == device and model.dtype == dtype:
        return model
    return MoshiLockstep(
        model.name,
        model.model.to(device=device, dtype=dtype),
        model.vocab,
        max_sessions=model.spec.max_sessions,
        description=TINY_DESCRIPTION,
    )


def measure_size(model: Any, size: int, steps: int, warmup: int, progress: bool) -> dict[str, Any]:
    """Step ``size`` sessions together; the step times in ms and the frame period's verdict."""
    spec = model.spec
    slots = [model.open_slot(f"bench-{size}-{i}", 1000 * size + i) for i in range(size)]
    inputs = {slot: _noise_frames(slot, 8, spec.frame_samples) for slot in slots}
    times: list[float] = []
    cpu: list[float] = []  # this process's CPU time per step: its cost, apart from the machine's load
    try:
        for n in range(warmup + steps):
            frames = [inputs[slot][n % 8] for slot in slots]
            start, start_cpu = time.perf_counter(), time.process_time()
            model.step(slots, frames)
            elapsed = 1000 * (time.perf_counter() - start)
            if n >= warmup:
                times.append(elapsed)
                cpu.append(1000 * (time.process_time() - start_cpu))
            if progress and (n + 1) % 10 == 0:
                click.echo(f"  batch {size}: step {n + 1}/{warmup + steps}", err=True)
    finally:
        for slot in slots:
            model.close_slot(slot)
    p50, p95, p99 = statistics.median(times), _percentile(times, 0.95), _percentile(times, 0.99)
    return {
        "sessions": size,
        "step_ms_p50": round(p50, 2),
        "step_ms_p95": round(p95, 2),
        "step_ms_p99": round(p99, 2),
        "step_ms_max": round(max(times), 2),
        "gpu_memory_gib": _gpu_memory_gib(model),
        "cpu_ms_p50": round(statistics.median(cpu), 2),
        "frames_over_period": sum(t > spec.frame_ms for t in times),
        "held": p95 < spec.frame_ms,
    }


def _gpu_memory_gib(model: Any) -> float | None:
    """The most GPU memory torch has held so far (weights, state pools, activations); None on a CPU."""
    import torch

    if model.device.type != "cuda":
        return None
    return round(torch.cuda.max_memory_allocated(model.device) / 1024**3, 2)


def first_audio(model: Any, frames: int = 5) -> dict[str, float]:
    """Open-to-first-sound of one session, alone: the slot's reset plus the step that first speaks."""
    spec = model.spec
    opens, second_steps = [], []
    for i in range(frames):
        start = time.perf_counter()
        slot = model.open_slot(f"first-{i}", i)
        opens.append(1000 * (time.perf_counter() - start))
        inputs = _noise_frames(i, 2, spec.frame_samples)
        model.step([slot], [inputs[0]])
        start = time.perf_counter()
        out = model.step([slot], [inputs[1]])[0]
        second_steps.append(1000 * (time.perf_counter() - start))
        model.close_slot(slot)
        if not any(out.audio):
            raise RuntimeError("the second step of a session returned silence")
    open_ms, step_ms = statistics.median(opens), statistics.median(second_steps)
    return {
        "open_slot_ms": round(open_ms, 2),
        "first_audio_step_ms": round(step_ms, 2),
        "first_audio_ms": round(2 * spec.frame_ms + open_ms + step_ms, 1),
    }


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"`{report['command']}`",
        "",
        f"{report['model']} on {report['device']} ({report['dtype']}), frame {report['frame_ms']:.0f} ms; "
        f"sessions held at the frame clock: **{report['sessions_held']}**; first audio "
        f"{report['first_audio']['first_audio_ms']} ms after a session starts talking.",
        "",
        "| sessions | step p50 ms | step p95 ms | p99 ms | max ms | CPU ms p50 | frames over 80 ms "
        "| GPU GiB | held |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for row in report["sizes"]:
        gpu = "-" if row.get("gpu_memory_gib") is None else row["gpu_memory_gib"]
        lines.append(
            f"| {row['sessions']} | {row['step_ms_p50']} | {row['step_ms_p95']} | {row.get('step_ms_p99')} "
            f"| {row['step_ms_max']} | {row['cpu_ms_p50']} | {row['frames_over_period']}/{report['steps']} "
            f"| {gpu} | {'yes' if row['held'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


@click.command()
@click.option(
    "--model", "model_name", default="moshi-tiny", show_default=True, type=click.Choice(["moshi-tiny"])
)
@click.option(
    "--geometry",
    default="tiny",
    show_default=True,
    type=click.Choice(["tiny", "7b"]),
    help="7b: random weights in Moshi 7B's geometry (4096 wide, 32 layers, 3000 frames of context).",
)
@click.option(
    "--sizes",
    default="1,2,4,8,16,32",
    show_default=True,
    help="Batch sizes (sessions stepped together), comma-separated; e.g. add 48,64 on a large GPU.",
)
@click.option("--steps", default=20, show_default=True, help="Timed steps (frames) per batch size.")
@click.option("--warmup", default=3, show_default=True, help="Untimed steps first, per batch size.")
@click.option("--device", default="auto", show_default=True, help="auto (cuda if present), cpu, cuda:N.")
@click.option(
    "--dtype",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "float32", "bfloat16", "float16"]),
    help="auto: bfloat16 on a GPU, float32 on a CPU.",
)
@click.option("--threads", default=1, show_default=True, help="CPU threads for torch (moshi-tiny: 1).")
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None, help="Write the figures.")
@click.option(
    "--markdown", "markdown_path", type=click.Path(path_type=Path), default=None, help="Write the table."
)
def command(
    model_name: str,
    geometry: str,
    sizes: str,
    steps: int,
    warmup: int,
    device: str,
    dtype: str,
    threads: int,
    json_path: Path | None,
    markdown_path: Path | None,
) -> None:
    """Lockstep step time against batch size, sessions held at the frame clock, first audio."""
    import torch

    torch.set_num_threads(threads)
    batch_sizes = sorted({int(size) for size in sizes.split(",") if size.strip()})
    if not batch_sizes or batch_sizes[0] < 1:
        raise click.BadParameter("give batch sizes of at least 1", param_hint="--sizes")
    click.echo(f"building {model_name} ({geometry} geometry) for {batch_sizes[-1]} sessions...", err=True)
    start = time.perf_counter()
    model = _build(geometry, batch_sizes[-1], device, dtype)
    build_s = time.perf_counter() - start
    rows = []
    for size in batch_sizes:
        click.echo(f"batch {size}...", err=True)
        rows.append(measure_size(model, size, steps, warmup, progress=True))
        click.echo(f"  p50 {rows[-1]['step_ms_p50']} ms, p95 {rows[-1]['step_ms_p95']} ms", err=True)
    held = [row["sessions"] for row in rows if row["held"]]
    report = {
        "command": f"livegen bench voice-lockstep --geometry {geometry} "
        f"--sizes {','.join(map(str, batch_sizes))} --steps {steps} --device {device} --dtype {dtype} "
        f"--threads {threads}",
        "model": model_name if geometry == "tiny" else "moshi (7B geometry, random weights)",
        "device": str(model.device),
        "dtype": str(model.dtype).removeprefix("torch."),
        "threads": threads,
        "build_s": round(build_s, 1),
        "frame_ms": model.spec.frame_ms,
        "steps": steps,
        "state_bytes_per_session": model.state_bytes() // model.spec.max_sessions,
        "sizes": rows,
        "sessions_held": max(held, default=0),
        "first_audio": first_audio(model),
    }
    click.echo(json.dumps(report, indent=1))
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=1) + "\n")
    if markdown_path is not None:
        markdown_path.write_text(markdown(report))
