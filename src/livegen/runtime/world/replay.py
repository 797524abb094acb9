"""Replay a recording (``recording.py``) against its model and check every frame (promise W6).

``livegen world replay RECORDING`` runs here. The recording's header names the
model, its weights digest, its loader options, the seed, the prompt, the seed
image and the chunk length; its log names, chunk by chunk, the events each
chunk applied and the sha256 of each frame it made. The replay loads the
model, opens a session the way the server did (the same ``WorldEngine`` and
runner, in this process, frames as raw ``rgb24``), and drives it so that each
chunk applies exactly the events it applied when recorded: it holds flow
control (one chunk ahead), accepts chunk k+1's events, then acks chunk k, so
chunk k+1 cannot start before its events are in; a ``world.reset`` is replayed
where it happened. Every replayed chunk must apply the same event ids and
make frames with the same sha256. A model that is deterministic (tiny-world,
procedural-world: same seed, events and chunk length, same frames) replays
exactly; a mismatch names the first chunk and frame that differ.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec

from livegen.errors import LivegenError
from livegen.models import Kind, Registry, default_registry
from livegen.protocol import world as wire
from livegen.runtime.world.engine import WorldEngine, WorldSettings
from livegen.runtime.world.recording import EVENTS_FILE
from livegen.runtime.world.runner import Runner


class RecordingUnreadable(LivegenError):
    """The file is not a recording's events log livegen can replay."""


@dataclasses.dataclass
class Recording:
    header: dict[str, Any]
    #: Accepted events by (player, id), as the client sent them (player 1 is the owner).
    events: dict[tuple[int, int], dict[str, Any]]
    #: Chunk lines in order, with ``{"type": "world.reset"}`` lines where resets came.
    steps: list[dict[str, Any]]

    @property
    def chunks(self) -> list[dict[str, Any]]:
        return [step for step in self.steps if step["type"] == "world.chunk"]


@dataclasses.dataclass
class Verdict:
    chunks: int = 0
    frames: int = 0
    #: The first difference, as a sentence; None when every chunk matched.
    mismatch: str | None = None

    @property
    def is_match(self) -> bool:
        return self.mismatch is None


def read_recording(path: Path) -> Recording:
    """A recording's events log: ``path`` is it, or the recording's directory."""
    if path.is_dir():
        path = path / EVENTS_FILE
    try:
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise RecordingUnreadable(f"cannot read {path}: {exc}") from exc
    if not lines or not isinstance(lines[0], dict) or lines[0].get("type") != "recording.header":
        raise RecordingUnreadable(f"{path} does not start with a recording.header line")
    events: dict[tuple[int, int], dict[str, Any]] = {}
    steps: list[dict[str, Any]] = []
    for line in lines[1:]:
        kind = line.get("type") if isinstance(line, dict) else None
        if kind == "world.event":
            events[int(line.get("player", 1)), int(line["event"]["event_id"])] = line["event"]
        elif kind in ("world.chunk", "world.reset"):
            steps.append(line)
    return Recording(lines[0], events, steps)


class _Collector:
    """The replayed session's output, as a client would read it: events, then each chunk's frames."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[str | bytes] = asyncio.Queue()

    async def send_text(self, text: str) -> None:
        self.queue.put_nowait(text)

    async def send_bytes(self, data: bytes) -> None:
        self.queue.put_nowait(data)

    async def next_chunk(self) -> tuple[wire.ChunkHeader, list[bytes]]:
        while True:
            message = await self.queue.get()
            if isinstance(message, bytes):
                continue
            event = wire.decode_server(message)
            if isinstance(event, wire.Error):
                raise RecordingUnreadable(
                    f"the replayed session failed: {event.error.code}: {event.error.message}"
                )
            if isinstance(event, wire.ChunkHeader):
                frames = [await self.queue.get() for _ in range(event.num_frames)]
                return event, [f for f in frames if isinstance(f, bytes)]


async def replay(
    recording: Recording,
    *,
    options: Mapping[str, str | int] | None = None,
    registry: Registry | None = None,
    on_chunk: Callable[[], None] = lambda: None,
) -> Verdict:
    """Re-run ``recording`` against its model; ``options`` replace the recorded loader options."""
    header = recording.header
    registry = registry or default_registry()
    entry = registry.resolve(Kind.WORLD, str(header["model"]))
    if entry is None:
        raise RecordingUnreadable(f"model {header['model']!r} is not installed here")
    model_options = {**header.get("model_options", {}), **(options or {})}
    settings = WorldSettings(
        max_sessions=1, max_unsent_bytes=2**62, realtime_headroom=0.0, model_options=model_options
    )
    engine = WorldEngine(registry, entry, settings)
    await engine.start()
    try:
        digest = getattr(engine.model, "weights_digest", None)
        if header.get("weights_digest") not in (None, digest):
            return Verdict(
                mismatch=f"the weights differ: recorded {header['weights_digest']}, loaded {digest}"
            )
        collector = _Collector()
        runner = await engine.open(
            _session_config(header), collector.send_text, collector.send_bytes, lambda code: None
        )
        try:
            return await _drive(engine, runner, recording, collector, on_chunk)
        finally:
            await runner.close(is_sending=False)
            runner.abort_sending()
            await runner.stop()
    finally:
        await engine.stop()


def _session_config(header: Mapping[str, Any]) -> wire.SessionConfig:
    return wire.SessionConfig(
        model=str(header["model"]),
        prompt=str(header.get("prompt") or ""),
        seed=int(header.get("seed") or 0),
        seed_image=header.get("seed_image"),
        pacing="asap",
        output=wire.OutputConfig(format="rgb24"),
        max_pending_events=int(header.get("max_pending_events") or 64),
        max_chunks_ahead=1,
        frames_per_chunk=int(header["frames_per_chunk"]),
    )


async def _drive(
    engine: WorldEngine,
    runner: Runner,
    recording: Recording,
    collector: _Collector,
    on_chunk: Callable[[], None],
) -> Verdict:
    """Feed each chunk its events before it may start, and compare what it makes."""
    verdict, steps = Verdict(), recording.steps
    _accept(engine, runner, recording, _next_chunk(steps, 0))  # chunk 0's, before it can start
    for position, step in enumerate(steps):
        if step["type"] == "world.reset":
            await runner.reset()
            _accept(engine, runner, recording, _next_chunk(steps, position + 1))
            continue
        header, frames = await collector.next_chunk()
        verdict.mismatch = _compare(step, header, frames)
        if verdict.mismatch is not None:
            return verdict
        verdict.chunks, verdict.frames = verdict.chunks + 1, verdict.frames + len(frames)
        on_chunk()
        following = steps[position + 1] if position + 1 < len(steps) else None
        if following is not None and following["type"] == "world.chunk":
            _accept(engine, runner, recording, following)
            while runner.flow.unsent > 0:  # noqa: ASYNC110 - an ack counts once its chunk is written
                await asyncio.sleep(0)
            runner.ack(header.chunk_index)
    return verdict


def _next_chunk(steps: list[dict[str, Any]], start: int) -> dict[str, Any] | None:
    return next(iter(_chunks_from(steps, start)), None)


def _chunks_from(steps: list[dict[str, Any]], start: int) -> Iterator[dict[str, Any]]:
    for step in steps[start:]:
        if step["type"] == "world.reset":
            return
        yield step


def _accept(engine: WorldEngine, runner: Runner, recording: Recording, chunk: dict[str, Any] | None) -> None:
    """Accept, in each player's id order, the events ``chunk`` applied when it was recorded."""
    for player, event_id in _applied(chunk or {}):
        event = recording.events.get((player, event_id))
        if event is None:
            raise RecordingUnreadable(
                f"chunk {chunk and chunk['chunk_index']} applied event {event_id} of player {player}, "
                "not in the log"
            )
        world_event = msgspec.convert(event, wire.WorldEvent)
        if player == 1:
            engine.accept(runner, world_event)
        else:
            _accept_as(engine, runner, world_event, player)


def _applied(chunk: dict[str, Any]) -> list[tuple[int, int]]:
    """(player, event id) of what a recorded chunk applied (a log from before shared worlds:
    the owner's ids)."""
    if applied := chunk.get("applied_events"):
        return sorted((int(item["player"]), int(item["event_id"])) for item in applied)
    return [(1, int(event_id)) for event_id in sorted(chunk.get("applied_event_ids", ()))]


def _accept_as(engine: WorldEngine, runner: Runner, event: wire.WorldEvent, player: int) -> None:
    """A joined player's event, seating it as it was; an id its seat's floor refuses was a new
    player's in that seat, whose ids were its own: it takes the seat afresh."""
    session = runner.session
    while player not in session.players:
        session.join()
    if event.event_id <= session.event_floor_of(player):
        session.leave(player)
        while player not in session.players:
            session.join()
    engine.accept_as(runner, event, player)


def _compare(recorded: dict[str, Any], header: wire.ChunkHeader, frames: list[bytes]) -> str | None:
    """Why the replayed chunk differs from the recorded one, or None."""
    where = f"chunk {recorded['chunk_index']} (request {recorded.get('request_id')})"
    if header.chunk_index != recorded["chunk_index"]:
        return f"{where}: the replay made chunk {header.chunk_index} in its place"
    if list(header.applied_event_ids) != list(recorded["applied_event_ids"]):
        return f"{where}: applied events {header.applied_event_ids}, recorded {recorded['applied_event_ids']}"
    replayed = [(e.player, e.event_id) for e in header.applied_events]
    if "applied_events" in recorded and replayed != [
        (e["player"], e["event_id"]) for e in recorded["applied_events"]
    ]:
        return f"{where}: applied events of players {replayed}, recorded {recorded['applied_events']}"
    digests = [hashlib.sha256(frame).hexdigest() for frame in frames]
    expected = list(recorded.get("frame_sha256", ()))
    if len(digests) != len(expected):
        return f"{where}: {len(digests)} frames, recorded {len(expected)}"
    for number, (got, want) in enumerate(zip(digests, expected, strict=True)):
        if got != want:
            return f"{where}: frame {number} differs (sha256 {got[:12]}, recorded {want[:12]})"
    return None
