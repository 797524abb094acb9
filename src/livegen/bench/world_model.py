"""``livegen bench world-model``: tiny-world against the room game, on the same actions in the same run.

Figures (medians unless named otherwise):

- speed: ms per frame and fps per session with 1 and N concurrent sessions,
  each step one batched call, as the runtime makes it; the baseline is
  procedural-world (from the registry when it is there, else the game itself,
  which is what procedural-world renders) timed the same way;
- first chunk: time of a new session's chunk-0 step (the model's share of
  ``session.created`` to first frame), the cold load time of the model, and
  the whole path over the wire: a real server and ``WorldClient``, from
  ``session.created`` arriving to the first chunk's frames decoded, for both
  models;
- action following: the same actions from the same seed in both models, the
  generated agent (found by its colour) against the game's, over F frames;
- stability: long play (default 10 minutes of frames at the spec's fps) with
  changing actions: per-minute mean pixel error against the game, agent
  found, and how far the frame's mean colour drifts from the game's;
- the checkpoint's size and training time, from its manifest.

``--strip PNG`` saves generated frames above the game's for the same actions.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import click
import numpy as np
import numpy.typing as npt

from livegen.models.room import game
from livegen.models.world import Tick, TickMeta
from livegen.training.tinyworld.data import agent_errors, find_agent, sticky_actions


def _ticks(prefix: str, chunk: int, seeds: list[int], action: str, prompt: str) -> list[Tick]:
    return [
        Tick(
            meta=TickMeta(f"{prefix}-{i}", f"{prefix}-{i}-{chunk}", chunk, ()),
            seed=seed,
            prompt=prompt,
            controls={"action": {"action": action}},
        )
        for i, seed in enumerate(seeds)
    ]


class GameReference:
    """procedural-world's frames computed from the game directly, chunk by chunk like a model."""

    name = "game"

    def __init__(self) -> None:
        self.states: dict[str, game.State] = {}
        self.spec = game.room_spec()

    def step(self, ticks: list[Tick], kv_storage: Any = None) -> list[npt.NDArray[np.uint8]]:
        out = []
        for tick in ticks:
            sid = tick.meta.session_id
            action = tick.controls["action"]["action"]
            frames = []
            if tick.meta.chunk_index == 0:
                self.states[sid] = game.new_game(tick.seed, game.theme_from_prompt(tick.prompt))
                frames.append(game.render(self.states[sid]))
            while len(frames) < self.spec.frames_per_chunk:
                self.states[sid] = game.step(self.states[sid], action)
                frames.append(game.render(self.states[sid]))
            out.append(np.stack(frames))
        return out


def play(
    model: Any, prefix: str, seeds: list[int], actions: list[str], prompt: str
) -> tuple[list[float], list[Any]]:
    """Step every session through ``actions`` (one per chunk); per-step seconds and the outputs."""
    seconds, outputs = [], []
    for chunk, action in enumerate(actions):
        ticks = _ticks(prefix, chunk, seeds, action, prompt)
        start = time.perf_counter()
        outputs.append(model.step(ticks, None))
        seconds.append(time.perf_counter() - start)
    for i in range(len(seeds)):
        if hasattr(model, "release"):
            model.release(f"{prefix}-{i}")
    return seconds, outputs


def _frames(outputs: list[Any], session: int) -> npt.NDArray[np.uint8]:
    return np.concatenate(
        [o[session].frames if hasattr(o[session], "frames") else o[session] for o in outputs]
    )


def speed(model: Any, sessions: int, num_chunks: int, fpc: int) -> dict[str, float]:
    actions = sticky_actions(np.random.default_rng(sessions), num_chunks)
    seconds, _ = play(model, f"speed{sessions}", list(range(100, 100 + sessions)), actions, "forest")
    steady = statistics.median(seconds[1:] if len(seconds) > 1 else seconds)
    return {"ms_per_frame": 1000 * steady / fpc, "fps_per_session": fpc / steady, "sessions": sessions}


def follow(model: Any, seed: int, num_frames: int, fpc: int, prompt: str) -> dict[str, Any]:
    actions = sticky_actions(np.random.default_rng(seed), num_frames // fpc, keep=0.6)
    _, outputs = play(model, f"follow{seed}", [seed], actions, prompt)
    frames = _frames(outputs, 0)
    states = _game_states(seed, prompt, actions, fpc)
    errors = agent_errors(frames, states)
    return {"errors": errors, "frames": frames, "truth": np.stack([game.render(s) for s in states])}


def first_frame_over_wire(model_name: str, sessions: int = 7) -> float:
    """Median ms from ``session.created`` reaching a real client to its first chunk decoded."""
    import asyncio

    from livegen.client.world import WorldClient
    from livegen.server import ServerConfig
    from livegen.server.thread import ServerThread

    async def one(url: str, seed: int) -> float:
        async with await WorldClient.connect(url) as client:
            await client.create(prompt="a forest room", seed=seed)
            created = time.perf_counter()
            await client.next_chunk(wait_s=60)
            return 1000 * (time.perf_counter() - created)

    # One session at a time, timed from creation: admission by measured speed (which, on a busy
    # machine, may still count the last session while its close settles) is not what is measured.
    config = ServerConfig(
        api_key=None, voice_model="none", world_model=model_name, world_realtime_headroom=0.0
    )
    with ServerThread(config) as server:
        server.wait_ready()
        url = f"{server.ws_url}/v1/worlds"
        return statistics.median(asyncio.run(one(url, seed)) for seed in range(sessions))


def _game_states(seed: int, prompt: str, actions: list[str], fpc: int) -> list[game.State]:
    state = game.new_game(seed, game.theme_from_prompt(prompt))
    states = [state]
    for chunk, action in enumerate(actions):
        for _ in range(fpc - 1 if chunk == 0 else fpc):
            state = game.step(state, action)
            states.append(state)
    return states


def stability(model: Any, minutes: float, fps: float, fpc: int, seed: int) -> list[dict[str, float]]:
    num_chunks = round(minutes * 60 * fps / fpc)
    actions = sticky_actions(np.random.default_rng(seed), num_chunks, keep=0.8)
    _, outputs = play(model, "stability", [seed], actions, "night")
    frames = _frames(outputs, 0)
    states = _game_states(seed, "night", actions, fpc)
    truth = np.stack([game.render(s) for s in states])
    per_minute = round(60 * fps)
    rows = []
    for start in range(0, len(frames), per_minute):
        gen, ref = (
            frames[start : start + per_minute].astype(float),
            truth[start : start + per_minute].astype(float),
        )
        found = [find_agent(f, "night") is not None for f in frames[start : start + per_minute]]
        rows.append(
            {
                "minute": start // per_minute,
                "mean_abs_error": float(np.abs(gen - ref).mean()),
                "mean_colour_drift": float(np.abs(gen.mean(axis=(1, 2)) - ref.mean(axis=(1, 2))).mean()),
                "agent_found": float(np.mean(found)),
            }
        )
    return rows


def save_strip(
    path: Path, generated: npt.NDArray[np.uint8], truth: npt.NDArray[np.uint8], every: int, scale: int = 3
) -> None:
    from PIL import Image

    picks = list(range(0, len(generated), every))
    top = np.concatenate([generated[i] for i in picks], axis=1)
    bottom = np.concatenate([truth[i] for i in picks], axis=1)
    gap = np.full((2, top.shape[1], 3), 255, dtype=np.uint8)
    image = Image.fromarray(np.concatenate([top, gap, bottom], axis=0))
    path.parent.mkdir(parents=True, exist_ok=True)
    image.resize((image.width * scale, image.height * scale), Image.Resampling.NEAREST).save(path)


@click.command("world-model")
@click.option(
    "--json", "json_path", type=click.Path(path_type=Path), default=None, help="Write all figures here."
)
@click.option("--sessions", default=4, show_default=True, help="Concurrent sessions for the batched figure.")
@click.option("--chunks", default=24, show_default=True, help="Chunks per speed run.")
@click.option("--follow-frames", default=300, show_default=True, help="Frames per action-following run.")
@click.option("--follow-seeds", default=12, show_default=True, help="Rooms (seeds) for action following.")
@click.option(
    "--stability-minutes", default=10.0, show_default=True, help="Minutes of play (at the spec's fps)."
)
@click.option("--steps", default=None, type=int, help="Denoising steps (default: the model's).")
@click.option("--deadband", default=None, type=float, help="Still-pixel deadband (default: the model's).")
@click.option(
    "--strip", type=click.Path(path_type=Path), default=None, help="Save a PNG strip: generated over game."
)
@click.option(
    "--model",
    "model_name",
    default="tiny-world",
    show_default=True,
    type=click.Choice(["tiny-world", "causal-wan-tiny"]),
    help="causal-wan-tiny: ms per chunk with and without the KV cache, and bytes per session at 1.3B.",
)
def command(
    json_path: Path | None,
    sessions: int,
    chunks: int,
    follow_frames: int,
    follow_seeds: int,
    stability_minutes: float,
    steps: int | None,
    deadband: float | None,
    strip: Path | None,
    model_name: str,
) -> None:
    """tiny-world against procedural-world: speed, first chunk, action following, stability, size."""
    from livegen.models import default_registry

    if model_name == "causal-wan-tiny":
        from livegen.bench.causal_wan import run

        figures = run(default_registry().load(model_name), chunks)
        click.echo(json.dumps(figures, indent=1))
        if json_path is not None:
            json_path.write_text(json.dumps(figures, indent=1) + "\n")
        return
    from livegen.models.tinyworld.weights import WEIGHTS_FILE, shipped_dir

    registry = default_registry()
    start = time.perf_counter()
    model = registry.load("tiny-world")
    load_s = time.perf_counter() - start
    if steps is not None:
        model.num_steps = steps
    if deadband is not None:
        model.deadband = deadband
    try:
        baseline: Any = registry.load("procedural-world")
        baseline_name = "procedural-world"
    except Exception:
        baseline, baseline_name = GameReference(), "game (procedural-world's rules and renderer)"
    fpc = model.spec.frames_per_chunk
    report: dict[str, Any] = {"model": "tiny-world", "baseline": baseline_name, "num_steps": model.num_steps}
    report["deadband"] = model.deadband
    report["load_s"] = load_s
    first = []
    for i in range(7):
        tick = _ticks(f"first{i}", 0, [i], "right", "forest")
        t0 = time.perf_counter()
        model.step(tick, None)
        first.append(1000 * (time.perf_counter() - t0))
        model.release(f"first{i}-0")
    report["first_chunk_ms"] = statistics.median(first)
    report["first_frame_over_wire_ms"] = {
        name: first_frame_over_wire(name) for name in ("tiny-world", "procedural-world")
    }
    report["speed"] = {
        "tiny-world": [speed(model, n, chunks, fpc) for n in (1, sessions)],
        "baseline": [speed(baseline, n, chunks, fpc) for n in (1, sessions)],
    }
    click.echo(
        json.dumps(
            {k: report[k] for k in ("load_s", "first_chunk_ms", "first_frame_over_wire_ms", "speed")},
            indent=1,
        )
    )
    runs = [follow(model, 2000 + s, follow_frames, fpc, game.THEMES[s % 6]) for s in range(follow_seeds)]
    errors = np.concatenate([r["errors"] for r in runs])
    report["action_following"] = {
        "frames": len(errors),
        "within_2px": float(np.mean(errors <= 2.0)),
        "agent_found": float(np.mean(np.isfinite(errors))),
        "median_error_px_where_found": float(np.median(errors[np.isfinite(errors)]))
        if np.isfinite(errors).any()
        else None,
        "per_run_within_2px": [float(np.mean(r["errors"] <= 2.0)) for r in runs],
    }
    click.echo(json.dumps(report["action_following"], indent=1))
    if strip is not None:
        save_strip(strip, runs[0]["frames"][:96], runs[0]["truth"][:96], every=6)
    if stability_minutes > 0:
        report["stability"] = stability(model, stability_minutes, model.spec.fps, fpc, seed=77)
        click.echo(json.dumps(report["stability"], indent=1))
    weights = shipped_dir() / WEIGHTS_FILE
    manifest = json.loads((shipped_dir() / "tiny_world.json").read_text())
    report["checkpoint"] = {
        "bytes": weights.stat().st_size,
        "train_seconds": manifest["train_seconds"],
        "steps": manifest["step"],
    }
    click.echo(json.dumps(report["checkpoint"]))
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=1) + "\n")
