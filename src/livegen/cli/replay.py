"""``livegen world replay RECORDING``: re-run a recording against its model and check its frames (W6).

RECORDING is a recording's directory (``--world-recordings DIR/<id>``) or its
events log (``events.jsonl``, as ``GET /v1/worlds/recordings/{id}/events``
serves it). The work is ``runtime/world/replay.py``'s; this module is the
command: a progress bar, a verdict, and an exit status (0: every frame
matches; 1: a frame, an applied event or the weights differ; 2: the recording
cannot be read or replayed here).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import click
from tqdm import tqdm

from livegen.errors import LivegenError


@click.command()
@click.argument("recording", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Replace one of the recorded model loader options (e.g. path=/weights, device=cpu); repeatable.",
)
@click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar.")
def replay(recording: Path, options: tuple[str, ...], progress: bool) -> None:
    """Re-run a recorded world session against its model and check every frame matches (W6)."""
    # Imported here: `livegen world` adds this command whenever it runs (cli.py's SUBTOOLS).
    from livegen.runtime.world.replay import RecordingUnreadable, read_recording
    from livegen.runtime.world.replay import replay as run_replay

    overrides: dict[str, str | int] = {}
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{option!r} is not KEY=VALUE", param_hint="--option")
        overrides[key] = int(value) if value.isdigit() else value
    try:
        loaded = read_recording(recording)
    except RecordingUnreadable as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from exc
    header = loaded.header
    click.echo(
        f"replaying {header.get('recording_id')}: {header.get('model')} seed {header.get('seed')}, "
        f"{len(loaded.chunks)} chunks, weights {str(header.get('weights_digest'))[:12]}"
    )
    bar = tqdm(total=len(loaded.chunks), unit="chunk", disable=not progress)
    try:
        verdict = asyncio.run(run_replay(loaded, options=overrides, on_chunk=lambda: bar.update(1)))
    except LivegenError as exc:
        bar.close()
        click.echo(f"error: cannot replay: {exc}", err=True)
        raise SystemExit(2) from exc
    bar.close()
    if verdict.is_match:
        click.echo(f"MATCH: {verdict.chunks} chunks, {verdict.frames} frames identical to the recording (W6)")
        return
    click.echo(f"MISMATCH after {verdict.chunks} matching chunks: {verdict.mismatch}")
    raise SystemExit(1)
