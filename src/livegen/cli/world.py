"""``livegen world``: play a scripted list of events against a world server and save the frames.

The script is a JSON list of steps. Each step sends one event (``prompt``,
``action`` as a shorthand for the ``action`` track, or raw ``controls``) or a
reset (``{"reset": true}``), then waits for ``chunks`` chunks (default 1).
The client holds flow control (one chunk ahead, acked by hand), so each event
lands on the chunk after the one it follows: the same script and seed always
give the same frames. Frames are saved as PNG files and an animated GIF
(Pillow's encoder), scaled up with nearest-neighbour pixels so they stay sharp.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import numpy as np
import websockets
from PIL import Image
from tqdm import tqdm

from livegen.client.world import ChunkOut, WorldClient, WorldError

DEMO_SCRIPT: list[dict[str, Any]] = [
    {"action": "right", "chunks": 3},
    {"action": "down", "chunks": 3},
    {"prompt": "a snowy night", "action": "left", "chunks": 3},
    {"prompt": "now the desert", "action": "up", "chunks": 3},
    {"action": "none", "chunks": 1},
]


@dataclass
class Step:
    event: dict[str, Any] | None
    is_reset: bool = False
    num_chunks: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


def parse_script(steps: list[dict[str, Any]]) -> list[Step]:
    """Script steps as events with ids; raises ``click.BadParameter`` naming the bad step."""
    parsed: list[Step] = []
    next_id = 1
    for number, raw in enumerate(steps, 1):
        if not isinstance(raw, dict):
            raise click.BadParameter(f"step {number} is not a JSON object")
        num_chunks = raw.get("chunks", 1)
        if not isinstance(num_chunks, int) or num_chunks < 0:
            raise click.BadParameter(f"step {number}: 'chunks' must be an integer >= 0")
        if raw.get("reset"):
            parsed.append(Step(None, is_reset=True, num_chunks=num_chunks))
            continue
        controls = list(raw.get("controls", []))
        if "action" in raw:
            controls.append(
                {"track": "action", "schema": "livegen.action.v1", "data": {"action": raw["action"]}}
            )
        event: dict[str, Any] = {"event_id": raw.get("event_id", next_id)}
        if "prompt" in raw:
            event["prompt"] = raw["prompt"]
        if controls:
            event["controls"] = controls
        next_id = event["event_id"] + 1
        parsed.append(Step(event if len(event) > 1 else None, num_chunks=num_chunks))
    return parsed


async def play(
    url: str, steps: list[Step], *, api_key: str | None = None, **session: Any
) -> tuple[dict[str, Any], list[ChunkOut]]:
    """Run the script; returns the effective session config and every chunk received, in order."""
    chunks: list[ChunkOut] = []
    client = await WorldClient.connect(url, api_key=api_key, auto_ack=False)
    async with client:
        created = await client.create(pacing="asap", max_chunks_ahead=1, **session)
        chunks.append(await client.next_chunk())
        for step in tqdm(steps, desc="script", unit="step", leave=False):
            if step.is_reset:
                await client.reset()
            elif step.event is not None:
                await client.event(**step.event)
            for _ in range(step.num_chunks):
                await client.send({"type": "chunk.ack", "chunk_index": chunks[-1].header.chunk_index})
                chunks.append(await client.next_chunk())
        await client.close()
    return created, chunks


def save(frames: list[np.ndarray], out: Path, *, fps: float, scale: int, is_gif: bool) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    nearest = Image.Resampling.NEAREST
    images = [Image.fromarray(f).resize((f.shape[1] * scale, f.shape[0] * scale), nearest) for f in frames]
    paths = []
    for index, image in enumerate(images):
        path = out / f"frame_{index:05d}.png"
        image.save(path)
        paths.append(path)
    if is_gif and images:
        gif = out / "world.gif"
        images[0].save(gif, save_all=True, append_images=images[1:], duration=round(1000 / fps), loop=0)
        paths.append(gif)
    return paths


@click.group(invoke_without_command=True)
@click.option(
    "--url", default="ws://127.0.0.1:8000", show_default=True, help="Server address (ws:// or wss://)."
)
@click.option("--api-key", envvar="LIVEGEN_API_KEY", default=None, help="Bearer key [env: LIVEGEN_API_KEY].")
@click.option(
    "--script",
    "script_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help='JSON list of steps, e.g. [{"action": "right", "chunks": 3}, {"prompt": "lava"}, {"reset": true}]. '
    "Default: a short walk through four themes.",
)
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0), help="Fixes the room's layout.")
@click.option("--prompt", default="a forest room", show_default=True, help="The initial prompt.")
@click.option(
    "--format",
    "fmt",
    default="png",
    show_default=True,
    type=click.Choice(["png", "jpeg", "rgb24"]),
    help="Frame encoding on the wire.",
)
@click.option(
    "--out", default="world-out", show_default=True, type=click.Path(path_type=Path), help="Output folder."
)
@click.option(
    "--scale",
    default=8,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Pixel upscaling of saved frames.",
)
@click.option("--gif/--no-gif", default=True, show_default=True, help="Also write an animated world.gif.")
@click.pass_context
def world(
    ctx: click.Context,
    url: str,
    api_key: str | None,
    script_path: Path | None,
    seed: int,
    prompt: str,
    fmt: str,
    out: Path,
    scale: int,
    gif: bool,
) -> None:
    """Play a scripted world session against a server and save its frames (PNG files and a GIF).

    `livegen world replay RECORDING` re-runs a server-side recording against its model instead
    (a subcommand the `livegen` command adds, as it runs the engine in this process).
    """
    if ctx.invoked_subcommand is not None:
        return
    raw = json.loads(script_path.read_text()) if script_path else DEMO_SCRIPT
    if not isinstance(raw, list):
        raise click.BadParameter("the script must be a JSON list of steps", param_hint="--script")
    steps = parse_script(raw)
    try:
        created, chunks = asyncio.run(
            play(url, steps, api_key=api_key, seed=seed, prompt=prompt, output={"format": fmt})
        )
    except OSError as exc:
        raise click.ClickException(f"cannot reach {url}: {exc}; start one with `livegen serve`") from exc
    except websockets.InvalidStatus as exc:
        status = exc.response.status_code
        hint = " (check --api-key or LIVEGEN_API_KEY)" if status == 401 else ""
        raise click.ClickException(f"{url} refused the session: HTTP {status}{hint}") from exc
    except WorldError as exc:
        raise click.ClickException(f"the server answered with an error: {exc}") from exc
    frames = [frame for chunk in chunks for frame in chunk.frames]
    paths = save(frames, out, fps=float(created["fps"]), scale=scale, is_gif=gif)
    click.echo(
        f"{len(chunks)} chunks, {len(frames)} frames from {created['model']} -> {out}/ ({len(paths)} files)"
    )
