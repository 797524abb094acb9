"""A session's own chunk length (``session.update`` ``frames_per_chunk``) through scheduler and runner.

The page asks for one frame a chunk (an input then waits about one frame for
the next chunk); a server's other sessions keep the model's length. The ticks,
KV pages, media clock and headers follow the session's length, a step never
mixes lengths (a model makes one per step), and the frame clock's admission
charges a session for its frames: a one-frame session costs what a four-frame
one does when the model's time is per frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from livegen.models.room import game
from livegen.models.world import Chunk, Tick
from livegen.runtime.world.kv_pool import required_bytes
from livegen.runtime.world.scheduler import Scheduler
from runtime.world.harness import GEOMETRY, RunnerHarness, until

FRAME_S = 0.025


class FrameTimedModel:
    """The room game's spec (4 frames, sessions may ask for 1 to 4); each frame a step makes takes
    ``FRAME_S`` on the scheduler's fake clock, and each tick's frames are as many as it asks."""

    name = "frame-timed"
    spec = game.room_spec(kv=GEOMETRY)

    def __init__(self, now: list[float]) -> None:
        self.now = now
        self.steps: list[list[Tick]] = []

    def new_kv_storage(self, num_pages: int) -> list[int]:
        return [0] * num_pages

    def step(self, ticks: Sequence[Tick], kv_storage: Any) -> list[Chunk]:
        self.steps.append(list(ticks))
        self.now[0] += FRAME_S * sum(t.num_frames for t in ticks)
        return [Chunk(t.meta, np.zeros((t.num_frames, 32, 32, 3), np.uint8)) for t in ticks]

    def release(self, session_id: str) -> None:
        pass


def harness_for(now: list[float]) -> tuple[RunnerHarness, FrameTimedModel]:
    model = FrameTimedModel(now)
    scheduler = Scheduler(model, kv_budget_bytes=required_bytes(GEOMETRY, 4, 4), clock=lambda: now[0])
    return RunnerHarness(scheduler, model.spec.controls), model


async def test_a_one_frame_session_beside_a_four_frame_one() -> None:
    now = [100.0]
    harness, model = harness_for(now)
    await harness.scheduler.start()
    short = harness.open(max_chunks_ahead=6, frames_per_chunk=1)
    full = harness.open(max_chunks_ahead=6)
    await until(
        lambda: len(harness.chunks(short.session_id)) == 6 and len(harness.chunks(full.session_id)) == 6
    )
    await harness.scheduler.stop()
    assert (short.spec.frames_per_chunk, full.spec.frames_per_chunk) == (1, 4)
    headers = harness.chunks(short.session_id)
    assert [h["num_frames"] for h in headers] == [1] * 6
    assert [h["media_time_ms"] for h in headers] == [k * 62.5 for k in range(6)]
    assert [h["num_frames"] for h in harness.chunks(full.session_id)] == [4] * 6
    for step in model.steps:
        assert len({t.num_frames for t in step}) == 1, "a step makes one chunk length"
        for tick in step:
            assert len(tick.write_pages) == tick.num_frames
            assert tick.num_frames == (1 if tick.meta.session_id == short.session_id else 4)


@pytest.mark.parametrize("frames_per_chunk", [1, 2, 4])
async def test_admission_charges_a_session_for_its_frames_whatever_its_chunk_length(
    frames_per_chunk: int,
) -> None:
    now = [100.0]
    harness, _ = harness_for(now)
    await harness.scheduler.start()
    harness.open(max_chunks_ahead=8, frames_per_chunk=frames_per_chunk)
    await until(lambda: harness.scheduler.num_steps >= 8)
    await harness.scheduler.stop()
    # 25 ms a frame: a chunk of n frames steps in n x 25 ms, 16/n times a second: 40% of the worker
    assert harness.scheduler.admission.costs.estimate(frames_per_chunk, 1) == pytest.approx(
        frames_per_chunk * FRAME_S
    )
    assert harness.scheduler.admission.worker_load(0, {frames_per_chunk: 1}) == pytest.approx(16 * FRAME_S)


def test_a_session_gets_the_nearest_length_the_model_makes() -> None:
    spec = game.room_spec()
    assert [spec.for_session(n).frames_per_chunk for n in (None, 1, 2, 4, 9)] == [4, 1, 2, 4, 4]
    fixed = spec.__class__(**{**spec.__dict__, "min_frames_per_chunk": None})
    assert fixed.for_session(1) is fixed, "a model without shorter chunks keeps its own"
