"""Training tiny-world on the room game: ``livegen train-world`` (its options: ``cli/train_world.py``).

Designed for one CPU core: data is generated on the fly (no dataset to store),
each step trains F target frames per clip against F clean context frames in
one masked sequence, and everything needed to continue (weights, their EMA,
optimizer, step, config, metrics) is checkpointed every few minutes, so a run
can stop and resume across sessions. Randomness comes from (seed, step), so a
resumed run draws the same data it would have drawn.

The loss is what makes it learn the moving parts: x0 error weighted up on
sprite pixels, on pixels that change, and on pixels the model gets badly
wrong (so a hallucinated sprite costs as much as a missing one). Noise levels
lean toward high t; context frames are corrupted with noise, and with
``--self-forcing`` they are replaced by the model's own predictions, so that
rollouts learn to correct their drift.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np
import torch

from livegen.models.room import game
from livegen.models.tinyworld.net import Config, Net, to_uint8, to_unit
from livegen.models.tinyworld.sampling import palette_table, rollout, snap_to_palette
from livegen.training.tinyworld.buffer import RolloutBuffer
from livegen.training.tinyworld.data import agent_errors, sticky_actions, theme_palettes
from livegen.training.tinyworld.export import fp16_tensors
from livegen.training.tinyworld.feed import Drawn, Recipe, batches

CHECKPOINT = "checkpoint.pt"
METRICS = "metrics.json"


@dataclass
class Hyper:
    batch: int = 16
    context: int = 3
    lr: float = 1.5e-3
    warmup: int = 100
    ema: float = 0.998
    sprite_weight: float = 10.0
    error_weight: float = 10.0
    #: A pixel off by more than this (in [-1, 1] units, any channel) counts as badly wrong. Night's
    #: floor and wall colours are 0.24 apart, so an error of 0.12 already decodes to the wrong one.
    wrong_threshold: float = 0.2
    context_noise: float = 0.08
    self_forcing: float = 0.0
    self_forcing_depth: int = 1
    #: Share of steps trained on long self-rollout streams (``buffer.py``).
    rollout_share: float = 0.0
    #: Share of clips that start with the agent pushing into the bar or the crate (``data.py``).
    #: 0.3: what both stretches of the shipped weights trained with (``livegen train-world``'s default).
    obstacle_share: float = 0.3


def make_optimizer(net: Net, lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.99))


def sample_t(gen: torch.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    """Noise levels leaning high: a quarter exactly 1 (where sampling starts), the rest logit-normal."""
    device = gen.device
    t = torch.sigmoid(torch.randn(shape, generator=gen, device=device) + 0.5)
    return torch.where(torch.rand(shape, generator=gen, device=device) < 0.25, torch.ones_like(t), t)


def loss_on_batch(
    net: Net, hp: Hyper, drawn: Drawn, buffer: RolloutBuffer | None = None
) -> tuple[torch.Tensor, dict[str, float]]:
    device = next(net.parameters()).device
    gen = torch.Generator(device=device).manual_seed(drawn.noise_seed)
    f = hp.context
    context: torch.Tensor | None = None
    if drawn.clip is None:
        assert buffer is not None, "a rollout step needs the rollout buffer"
        clip, context = buffer.batch()
        buffer.advance(net, clip, context, gen)
    else:
        clip = drawn.clip
    x = to_unit(torch.from_numpy(clip.frames).to(device))
    actions, themes = torch.from_numpy(clip.actions).to(device), torch.from_numpy(clip.themes).to(device)
    b = x.shape[0]
    if context is None:
        sigma = torch.rand(b, 1, 1, 1, 1, generator=gen, device=device) * hp.context_noise
        context = x[:, :f] + sigma * torch.randn(x[:, :f].shape, generator=gen, device=device)
        if hp.self_forcing > 0 and torch.rand((), generator=gen, device=device) < hp.self_forcing:
            context = _self_forced_context(net, x, context, actions, themes, hp.self_forcing_depth, gen)
    targets = x[:, 1:]
    t = sample_t(gen, (b, f))
    noise = torch.randn(targets.shape, generator=gen, device=device)
    noisy = (1 - t)[..., None, None, None] * targets + t[..., None, None, None] * noise
    clean_prev = torch.cat([context[:, :1], context[:, :-1]], dim=1)
    zeros = torch.zeros(b * f, device=device)
    clean_cond = net.cond(zeros, actions[:, :f].flatten(), themes[:, :f].flatten()).view(b, f, -1)
    noisy_cond = net.cond(t.flatten(), actions[:, 1:].flatten(), themes[:, 1:].flatten()).view(b, f, -1)
    pred = net.forward_train(context, clean_prev, clean_cond, noisy, context, noisy_cond)
    err = (pred - targets).pow(2).mean(dim=2)  # (B, F, 32, 32)
    seen = err.detach()
    sprites = torch.from_numpy(clip.sprites).to(device)
    moving = (sprites[:, 1:] | sprites[:, :-1] | ((x[:, 1:] - x[:, :-1]).abs().amax(dim=2) > 0.01)).float()
    wrong = ((pred.detach() - targets).abs().amax(dim=2) > hp.wrong_threshold).float()
    weight = 1 + hp.sprite_weight * moving + hp.error_weight * wrong
    loss = (weight * err).mean()
    return loss, {
        "mse": float(seen.mean()),
        "mse_moving": float((seen * moving).sum() / moving.sum().clamp(min=1)),
    }


@torch.no_grad()
def _self_forced_context(
    net: Net,
    x: torch.Tensor,
    context: torch.Tensor,
    actions: torch.Tensor,
    themes: torch.Tensor,
    depth: int,
    gen: torch.Generator,
) -> torch.Tensor:
    """Context frames 1.. replaced by the model's own one-step predictions, ``depth`` times over,
    so context frame i is an i-step rollout from the true frame 0 once depth >= i."""
    b, f = context.shape[:2]
    was_training = net.training
    net.eval()
    zeros = torch.zeros(b * f, device=x.device)
    clean_cond = net.cond(zeros, actions[:, :f].flatten(), themes[:, :f].flatten()).view(b, f, -1)
    noisy_cond = net.cond(zeros + 1, actions[:, 1:].flatten(), themes[:, 1:].flatten()).view(b, f, -1)
    palettes = _palette_table(str(x.device))[themes[:, 1:f].flatten()]
    for _ in range(depth):
        clean_prev = torch.cat([context[:, :1], context[:, :-1]], dim=1)
        noise = torch.randn(x[:, 1:].shape, generator=gen, device=x.device)
        pred = net.forward_train(context, clean_prev, clean_cond, noise, context, noisy_cond)
        own = snap_to_palette(pred[:, :-1].flatten(0, 1), palettes)
        context = torch.cat([context[:, :1], to_unit(to_uint8(own)).view_as(pred[:, :-1])], dim=1)
    net.train(was_training)
    return context


@functools.cache
def _palette_table(device: str) -> torch.Tensor:
    """The codebooks serving snaps to, by theme index, so self-forced context looks like a served
    rollout's."""
    table = palette_table(theme_palettes())
    assert table is not None
    return table.to(device)


def probe(net: Net, num_frames: int = 48, seeds: tuple[int, ...] = (1001, 1002, 1003)) -> dict[str, float]:
    """Action following on held-out rooms: agent position in a rollout against the game's."""
    net.eval()
    palettes = theme_palettes()
    errors = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        theme = game.THEMES[seed % len(game.THEMES)]
        state = game.new_game(seed, theme)
        actions = sticky_actions(rng, num_frames)
        states = [state]
        for action in actions:
            states.append(game.step(states[-1], action))
        frames = rollout(
            net,
            game.render(state),
            actions,
            [theme] * num_frames,
            seed=seed,
            deadband=0.0,
            palettes=palettes,
        )
        errors.append(agent_errors(frames[1:], states[1:]))
    net.train()
    e = np.concatenate(errors)
    return {
        "within_2px": float(np.mean(e <= 2.0)),
        "agent_found": float(np.mean(np.isfinite(e))),
        "median_error_px": float(np.median(e)),
    }


def save(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def _resolve_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise click.UsageError(f"--device {name}: this torch sees no CUDA device")
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return torch.device(name)


def _start(
    ckpt_path: Path, resume: bool, seed: int, cfg: Config | None, hp: Hyper, device: torch.device
) -> tuple[Net, Net, torch.optim.Optimizer, int, dict[str, Any], int]:
    """Network, EMA, optimizer, first step, metrics and seed: from the checkpoint, or fresh."""
    metrics: dict[str, Any] = {"history": [], "probes": [], "train_seconds": 0.0}
    if resume and ckpt_path.exists():
        state = torch.load(ckpt_path, weights_only=False, map_location="cpu")
        net = Net(Config(**state["config"]))
        net.load_state_dict(state["model"])
        ema = Net(net.cfg)
        ema.load_state_dict(state["ema"])
        net.to(device), ema.to(device)
        opt = make_optimizer(net, hp.lr)
        opt.load_state_dict(state["optimizer"])
        return net, ema, opt, state["step"], state["metrics"], state["seed"]
    torch.manual_seed(seed)
    net = Net(cfg or Config())
    ema = Net(net.cfg)
    ema.load_state_dict(net.state_dict())
    net.to(device), ema.to(device)
    return net, ema, make_optimizer(net, hp.lr), 0, metrics, seed


def learning_rate(hp: Hyper, step: int, progress: float, lr_end: float | None) -> float:
    """Warm-up over the run's first steps, then, with ``lr_end``, a cosine from lr down to lr_end
    over this session (``progress`` 0 -> 1): annealing a session's end lands on a calmer optimum."""
    lr = hp.lr if lr_end is None else lr_end + (hp.lr - lr_end) * 0.5 * (1 + math.cos(math.pi * progress))
    return lr * min(1.0, (step + 1) / hp.warmup)


def _cpu_copy(net: Net) -> Net:
    if next(net.parameters()).device.type == "cpu":
        return net
    return copy.deepcopy(net).cpu()


def train(
    out: Path,
    *,
    steps: int | None,
    minutes: float | None,
    seed: int,
    resume: bool,
    hp: Hyper,
    cfg: Config | None = None,
    device: str = "cpu",
    workers: int | None = 0,
    lr_end: float | None = None,
    snapshots: bool = False,
    checkpoint_every_s: float = 180.0,
    probe_every: int = 250,
    show_progress: bool = True,
) -> dict[str, Any]:
    from tqdm import tqdm

    torch.set_num_threads(1)
    where = _resolve_device(device)
    if where.type != "cpu" and hp.rollout_share > 0:
        raise click.UsageError("--rollout-share runs on the CPU only")
    out.mkdir(parents=True, exist_ok=True)
    ckpt_path = out / CHECKPOINT
    net, ema, opt, start, metrics, seed = _start(ckpt_path, resume, seed, cfg, hp, where)
    ema.requires_grad_(False)
    net.train()
    buffer = RolloutBuffer(hp.batch, hp.context, seed + start) if hp.rollout_share > 0 else None
    recipe = Recipe(hp.batch, hp.context + 1, hp.obstacle_share, hp.rollout_share)
    if workers is None:
        workers = 0 if where.type == "cpu" else max(1, (os.cpu_count() or 1) - 2)
    feed = batches(seed, recipe, start, workers)
    budget_s = minutes * 60 if minutes else math.inf
    end = start + steps if steps else None
    bar = tqdm(
        total=steps if steps else (round(budget_s) if minutes else None),
        unit="step" if steps else "s",
        disable=not show_progress,
        desc=f"train-world ({where.type})",
    )
    began, last_ckpt, smooth = time.monotonic(), time.monotonic(), None
    step = start
    # where each stretch of the run trained: a step on a GPU's batch of 256 is not a CPU's step of 16
    session = {"device": str(where), "batch": hp.batch, "workers": workers, "first_step": start}
    metrics.setdefault("sessions", []).append(session)

    def checkpoint() -> None:
        metrics["train_seconds"] += time.monotonic() - checkpoint.since  # type: ignore[attr-defined]
        checkpoint.since = time.monotonic()  # type: ignore[attr-defined]
        metrics["step"] = step
        session.update(last_step=step, seconds=round(time.monotonic() - began, 1))
        metrics["config"], metrics["hyper"] = net.cfg.to_dict(), vars(hp)
        payload = {"model": net.state_dict(), "ema": ema.state_dict(), "optimizer": opt.state_dict()}
        save(
            ckpt_path,
            {**payload, "step": step, "config": net.cfg.to_dict(), "seed": seed, "metrics": metrics},
        )
        (out / METRICS).write_text(json.dumps(metrics, indent=1))
        if snapshots:
            (out / "snapshots").mkdir(exist_ok=True)
            save(out / "snapshots" / f"ema-{step}.pt", fp16_tensors(ema.state_dict()))

    def progress() -> float:
        by_steps = (step - start) / steps if steps else 0.0
        return min(1.0, max(by_steps, (time.monotonic() - began) / budget_s))

    checkpoint.since = began  # type: ignore[attr-defined]
    while (end is None or step < end) and time.monotonic() - began < budget_s:
        for group in opt.param_groups:
            group["lr"] = learning_rate(hp, step, progress(), lr_end)
        loss, parts = loss_on_batch(net, hp, next(feed), buffer)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            decay = min(hp.ema, (1 + step) / (10 + step))  # warm-up: early EMA tracks the weights
            torch._foreach_lerp_(list(ema.parameters()), list(net.parameters()), 1 - decay)
        step += 1
        value = float(loss.detach())
        smooth = value if smooth is None else 0.98 * smooth + 0.02 * value
        if step % 25 == 0:
            metrics["history"].append({"step": step, "loss": smooth, **parts})
        bar.set_postfix(step=step, loss=f"{smooth:.4f}", moving=f"{parts['mse_moving']:.4f}")
        bar.update(1 if steps else round(time.monotonic() - began) - bar.n)
        if step % probe_every == 0:
            result = {"step": step, **probe(_cpu_copy(ema))}
            metrics["probes"].append(result)
            bar.write(json.dumps(result))
        if time.monotonic() - last_ckpt > checkpoint_every_s:
            checkpoint()
            last_ckpt = time.monotonic()
    feed.close()
    checkpoint()
    bar.close()
    return metrics
