"""The scheduler and runner with one-frame chunks: the media clock, the start-ack lead, the frame
clock's admission and the KV pages all follow ``spec.frames_per_chunk``, not the room game's 4.

A test double stands in for the model (as in ``test_world_scheduler.py``), with the room game's
spec at one frame a chunk; the runner, scheduler, session core and KV pool are the real ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from livegen.errors import CapacityExceeded
from livegen.models.room import game
from livegen.models.world import Chunk, Tick
from livegen.runtime.world.kv_pool import required_bytes
from livegen.runtime.world.runner import LEAD_FACTOR, LEAD_MARGIN_S, Options, Runner
from livegen.runtime.world.scheduler import Scheduler
from livegen.world import Manager
from runtime.world.harness import GEOMETRY, RunnerHarness, until

FRAME_S = 1 / game.FPS


class OneFrameModel:
    """One frame a chunk; each tick of a step takes ``tick_s`` on the scheduler's fake clock."""

    name = "one-frame"
    spec = dataclasses.replace(game.room_spec(kv=GEOMETRY), frames_per_chunk=1)

    def __init__(self, now: list[float], tick_s: float = 0.0) -> None:
        self.now, self.tick_s = now, tick_s
        self.ticks: list[Tick] = []

    def new_kv_storage(self, num_pages: int) -> list[int]:
        return [0] * num_pages

    def step(self, ticks: Sequence[Tick], kv_storage: Any) -> list[Chunk]:
        self.now[0] += self.tick_s * len(ticks)
        self.ticks.extend(ticks)
        return [Chunk(t.meta, np.zeros((1, 32, 32, 3), np.uint8)) for t in ticks]

    def release(self, session_id: str) -> None:
        pass


def runner_for(model: OneFrameModel, now: list[float], ahead: int) -> tuple[Runner, Scheduler]:
    budget = required_bytes(GEOMETRY, 1, 1)
    scheduler = Scheduler(model, kv_budget_bytes=budget, clock=lambda: now[0])
    manager = Manager(tracks=model.spec.controls, new_id=lambda: "x")

    async def discard(message: Any) -> None:
        pass

    runner = Runner(manager.create(), manager, scheduler, discard, discard, Options(max_chunks_ahead=ahead))
    return runner, scheduler


async def test_one_frame_chunks_follow_the_media_clock_a_frame_apart() -> None:
    now = [100.0]
    model = OneFrameModel(now)
    runner, scheduler = runner_for(model, now, ahead=16)
    scheduler.add(runner)
    for index in range(5):
        plan = runner.begin_tick(now[0])
        assert plan is not None and plan.meta.chunk_index == index
        [chunk] = model.step([Tick(plan.meta, 0, "", {})], None)
        runner.tick_done(plan, chunk, 1.0)
        deadline = 100.0 + index * FRAME_S  # chunk k+1 once chunk k is due on screen
        assert runner.next_deadline() == pytest.approx(deadline)
        now[0] = deadline
    runner.abort_sending()


async def test_a_start_ack_leads_a_one_frame_chunk_by_its_step_time() -> None:
    now = [100.0]
    model = OneFrameModel(now)
    runner, _ = runner_for(model, now, ahead=1)
    runner.start()
    plan = runner.begin_tick(now[0])
    assert plan is not None
    [chunk] = model.step([Tick(plan.meta, 0, "", {})], None)
    runner.tick_done(plan, chunk, 10.0)  # a 10 ms step
    await until(lambda: runner.sender.num_chunks_sent == 1)
    now[0] = 100.5
    runner.ack(0, at="start")  # chunk 0 shows at 100.5, so chunk 1 is needed a frame later
    lead = LEAD_FACTOR * 0.010 + LEAD_MARGIN_S
    assert runner.next_deadline() == pytest.approx(100.5 + FRAME_S - lead)
    runner.abort_sending()


async def test_admission_counts_sixteen_one_frame_chunks_a_second() -> None:
    now = [100.0]
    model = OneFrameModel(now, tick_s=0.02)  # 20 ms a tick: 32% of a worker per session
    harness = RunnerHarness(
        Scheduler(model, kv_budget_bytes=required_bytes(GEOMETRY, 1, 5), clock=lambda: now[0]),
        model.spec.controls,
    )
    await harness.scheduler.start()
    first = harness.open(max_chunks_ahead=2)  # asap: it measures the step, never charged
    await until(lambda: harness.scheduler.admission.costs.is_measured)
    assert harness.scheduler.admission.worker_load(0, {1: 1}) == pytest.approx(16 * 0.02)
    harness.open(pacing="realtime", max_chunks_ahead=2)
    harness.open(pacing="realtime", max_chunks_ahead=2)  # two need 64%: admitted
    with pytest.raises(CapacityExceeded) as error:
        harness.open(pacing="realtime")  # three would need 96%
    assert error.value.code == "realtime_capacity"
    pool = harness.scheduler.workers.kv_pools[0]
    assert pool.pages_per_session == GEOMETRY.sink_frames + GEOMETRY.window_frames + 1
    await until(lambda: len(harness.chunks(first.session_id)) >= 2)
    assert all(len(tick.write_pages) == 1 for tick in model.ticks)  # one KV page a chunk
    await harness.scheduler.stop()


async def test_a_chunk_shown_late_makes_the_next_ones_start_that_much_sooner() -> None:
    """A one-frame chunk leaves little room: when a start ack says a chunk was shown 30 ms after
    the client needed it, the next chunks start 30 ms sooner than the step time alone says."""
    now = [100.0]
    model = OneFrameModel(now)
    runner, _ = runner_for(model, now, ahead=1)
    runner.start()
    for index, shown_at in enumerate([100.5, 100.5 + FRAME_S + 0.030]):
        now[0] = max(now[0], runner.next_deadline() or now[0])
        plan = runner.begin_tick(now[0])
        assert plan is not None and plan.meta.chunk_index == index
        [chunk] = model.step([Tick(plan.meta, 0, "", {})], None)
        runner.tick_done(plan, chunk, 10.0)
        await until(lambda: runner.sender.num_chunks_sent == index + 1)  # noqa: B023 - awaited here
        now[0] = shown_at
        runner.ack(index, at="start")
    lead = LEAD_FACTOR * 0.010 + LEAD_MARGIN_S + 0.030
    assert runner.next_deadline() == pytest.approx(now[0] + FRAME_S - lead)
    runner.abort_sending()
