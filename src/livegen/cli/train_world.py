"""``livegen train-world``: train tiny-world on the room game; the work is ``training/tinyworld/``.

The command and its options only: each option named after a ``Hyper`` field takes its default
from it, and ``train`` (``training/tinyworld/train.py``) does the training, the checkpoints and
the metrics. Imported only when run (``cli/__init__.py``), since it brings torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from livegen.training.tinyworld.train import CHECKPOINT, METRICS, Hyper, train


@click.command("train-world")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("runs/tiny-world"),
    show_default=True,
    help="Folder for checkpoint.pt and metrics.json.",
)
@click.option("--steps", type=click.IntRange(1), default=None, help="Optimizer steps to run (this session).")
@click.option(
    "--minutes",
    type=click.FloatRange(0, min_open=True),
    default=None,
    help="Wall-clock minutes to train (this session); with --steps, whichever ends first.",
)
@click.option("--seed", default=0, show_default=True, help="Seed of weights and data (kept on --resume).")
@click.option("--resume", is_flag=True, help="Continue from OUT/checkpoint.pt if it exists.")
@click.option("--batch", default=Hyper.batch, show_default=True, help="Clips per step.")
@click.option("--lr", default=Hyper.lr, show_default=True, help="Peak learning rate.")
@click.option(
    "--self-forcing",
    default=Hyper.self_forcing,
    show_default=True,
    help="Share of steps whose context frames are the model's own predictions.",
)
@click.option(
    "--self-forcing-depth",
    default=Hyper.self_forcing_depth,
    show_default=True,
    help="Rollout depth of those predictions.",
)
@click.option(
    "--rollout-share",
    default=Hyper.rollout_share,
    show_default=True,
    help="Share of steps whose context is a long rollout of the model's own frames.",
)
@click.option(
    "--obstacle-share",
    default=Hyper.obstacle_share,
    show_default=True,
    help="Share of clips that start with the agent pushing into the bar or the crate, the "
    "collisions rollouts get wrong most.",
)
@click.option(
    "--wrong-threshold",
    default=Hyper.wrong_threshold,
    show_default=True,
    help="Per-pixel error (in [-1, 1] units) above which the loss weighs a pixel up as badly wrong.",
)
@click.option(
    "--device",
    default="auto",
    show_default=True,
    help="Where to train: cpu, cuda, cuda:N, or auto (cuda when torch sees one).",
)
@click.option(
    "--workers",
    type=click.IntRange(0),
    default=None,
    help="Processes that render training clips ahead of the step (0: in the training process). "
    "Default: 0 on the CPU; on a GPU, which trains faster than one process renders, all cores "
    "but two.",
)
@click.option(
    "--lr-end",
    type=click.FloatRange(0),
    default=None,
    help="Anneal the learning rate on a cosine from --lr down to this over this session.",
)
@click.option(
    "--snapshots",
    is_flag=True,
    help="At every checkpoint also keep the EMA weights as OUT/snapshots/ema-STEP.pt (fp16).",
)
@click.option(
    "--checkpoint-minutes",
    type=click.FloatRange(0, min_open=True),
    default=3.0,
    show_default=True,
    help="Minutes between checkpoints (and snapshots).",
)
@click.option(
    "--probe-every",
    type=click.IntRange(1),
    default=250,
    show_default=True,
    help="Steps between action-following probes (3 short rollouts on the CPU).",
)
@click.option(
    "--export",
    type=click.Path(path_type=Path),
    default=None,
    help="After training, write the shippable fp16 weights (EMA) here.",
)
def command(
    out: Path,
    steps: int | None,
    minutes: float | None,
    seed: int,
    resume: bool,
    device: str,
    workers: int | None,
    lr_end: float | None,
    snapshots: bool,
    checkpoint_minutes: float,
    probe_every: int,
    export: Path | None,
    **hyper: Any,
) -> None:
    """Train the tiny-world model on the procedural room game (resumable; one CPU thread, or a GPU)."""
    if steps is None and minutes is None:
        raise click.UsageError("give --steps or --minutes")
    # The options named after Hyper's fields (their defaults read from it) go straight in.
    hp = Hyper(**hyper)
    metrics = train(
        out,
        steps=steps,
        minutes=minutes,
        seed=seed,
        resume=resume,
        hp=hp,
        device=device,
        workers=workers,
        lr_end=lr_end,
        snapshots=snapshots,
        checkpoint_every_s=checkpoint_minutes * 60,
        probe_every=probe_every,
    )
    click.echo(f"step {metrics['step']}, {metrics['train_seconds'] / 60:.1f} min trained; {out / METRICS}")
    if export is not None:
        from livegen.training.tinyworld.export import export_weights

        digest = export_weights(out / CHECKPOINT, export)
        click.echo(f"exported {export} (sha256 {digest})")
