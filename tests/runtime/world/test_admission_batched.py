"""Admission by what the batch really costs (issue 39): a model whose batched step cost is scripted.

The model's step advances the scheduler's clock by a scripted cost for its batch
size (a fixed cost per step plus one per tick: batching saves, as tiny-world's
does), on top of the real clock, so realtime sessions are really paced and
really batched. Admission must admit exactly the sessions whose batch still
makes every chunk in real time within the headroom, refuse the next with
``realtime_capacity``, and never charge ``asap`` sessions as realtime ones.
The model is a test double (a scripted cost stands in for a network); the
scheduler, workers, runners and session cores are the real ones.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from livegen.errors import CapacityExceeded
from livegen.models.room import game
from livegen.models.world import Chunk, Tick
from livegen.runtime.world.admission import REALTIME_HEADROOM
from livegen.runtime.world.calibrate import calibrate
from livegen.runtime.world.capacity import StepCosts
from livegen.runtime.world.scheduler import Scheduler
from runtime.world.harness import RunnerHarness, until

#: At 4 fps a chunk of 4 frames lasts a second: the scripted costs dwarf the real clock's share of a
#: step (a thread hop, a few ms on a busy machine), and a step's cost moves the clock at once.
SPEC = dataclasses.replace(game.room_spec(), fps=4.0)
PERIOD_S = SPEC.frames_per_chunk / SPEC.fps
LIMIT_S = REALTIME_HEADROOM * PERIOD_S  # the longest step that keeps every session on time


class ScriptedCostModel:
    """Blank frames; each step costs ``base_s + per_tick_s * len(ticks)`` on the clock."""

    name = "scripted-cost"
    spec = SPEC

    def __init__(self, base_s: float, per_tick_s: float) -> None:
        self.base_s, self.per_tick_s = base_s, per_tick_s
        self.offset_s = 0.0
        self.steps: list[list[str]] = []

    def clock(self) -> float:
        return time.monotonic() + self.offset_s

    def step(self, ticks: Sequence[Tick], kv_storage: Any) -> list[Chunk]:
        self.offset_s += self.base_s + self.per_tick_s * len(ticks)
        self.steps.append([tick.meta.session_id for tick in ticks])
        return [
            Chunk(t.meta, np.zeros((t.num_frames or 4, SPEC.height, SPEC.width, 3), np.uint8)) for t in ticks
        ]

    def release(self, session_id: str) -> None:
        pass


def scripted_for(capacity: int, base_s: float = 0.08) -> ScriptedCostModel:
    """A model whose batch of ``capacity`` ends half a tick inside the limit, one more half past it."""
    return ScriptedCostModel(base_s, (LIMIT_S - base_s) / (capacity + 0.5))


def harness_for(model: ScriptedCostModel) -> RunnerHarness:
    return RunnerHarness(Scheduler(model, clock=model.clock), SPEC.controls)


def measured(harness: RunnerHarness, batch: int) -> bool:
    return batch in harness.scheduler.admission.costs.measured().get(SPEC.frames_per_chunk, {})


@pytest.mark.parametrize("capacity", [2, 4, 8])
async def test_realtime_sessions_are_admitted_while_their_batch_keeps_the_frame_clock(capacity: int) -> None:
    model = scripted_for(capacity)
    harness = harness_for(model)
    await harness.scheduler.start()
    try:
        for count in range(1, capacity + 1):
            harness.open(pacing="realtime", max_chunks_ahead=1000)  # admitted
            await until(lambda count=count: measured(harness, count))  # they batch: one step of all
        costs = harness.scheduler.admission.costs
        assert costs.estimate(4, capacity) >= model.base_s + model.per_tick_s * capacity
        assert harness.scheduler.admission.worker_load(0) <= REALTIME_HEADROOM  # every admitted one on time
        with pytest.raises(CapacityExceeded) as refused:
            harness.open(pacing="realtime", max_chunks_ahead=1000)
        assert refused.value.code == "realtime_capacity"
        assert harness.scheduler.num_sessions == capacity  # the refused one holds nothing
        assert harness.scheduler.admission.capacity()["capacity"] == {"4": capacity}
    finally:
        await harness.scheduler.stop()


async def test_admission_does_not_charge_each_session_one_sessions_step() -> None:
    """Issue 39's server: one session alone ran 86.6 fps, each of four 32.2 fps; admission that
    charged every session the one-session step (51%) refused the second; four fit."""
    costs = StepCosts(fps=16)
    costs.record(4, 1, 4 / 86.6)
    costs.record(4, 4, 4 / 32.2)  # one step makes each of the four its 4 frames
    assert costs.load({4: 2}) <= REALTIME_HEADROOM
    assert costs.capacity(4, REALTIME_HEADROOM) >= 4


async def test_asap_sessions_are_never_charged_and_never_slow_the_realtime_batch() -> None:
    model = scripted_for(3)
    harness = harness_for(model)
    await harness.scheduler.start()
    try:
        asap = harness.open(pacing="asap", max_chunks_ahead=1000)
        await until(lambda: measured(harness, 1))
        realtime = [harness.open(pacing="realtime", max_chunks_ahead=1000) for _ in range(2)]
        await until(lambda: measured(harness, 3))  # the asap one joins a batch of two: it fits
        realtime.append(harness.open(pacing="realtime", max_chunks_ahead=1000))  # asap not charged
        with pytest.raises(CapacityExceeded):
            harness.open(pacing="realtime", max_chunks_ahead=1000)
        third = realtime[-1].session_id
        await until(lambda: any(third in step for step in model.steps))
        joined = next(
            i for i, step in enumerate(model.steps) if third in step
        )  # steps after: all planned with it
        ids = {runner.session_id for runner in realtime}
        await until(lambda: sum(ids <= set(step) for step in model.steps[joined:]) >= 4)
        for step in model.steps[joined:]:
            if ids & set(step):  # the asap one would grow the three's batch past the clock: never
                assert asap.session_id not in step
    finally:
        await harness.scheduler.stop()


async def test_one_frame_chunks_are_charged_what_a_one_frame_step_costs() -> None:
    """The page asks for 1-frame chunks: 16 chunks a second, each with a step's fixed cost."""
    costs = StepCosts(fps=16)
    costs.record(4, 1, 0.040)  # a 4-frame chunk: 40 ms, 16% of a worker at 4 chunks a second
    assert costs.load({1: 1}) == pytest.approx(
        16 * 0.040
    )  # unmeasured: a shorter chunk costs at most as much
    costs.record(1, 1, 0.015)  # measured: 15 ms a 1-frame step (its fixed cost included)
    assert costs.load({1: 1}) == pytest.approx(16 * 0.015)
    assert costs.load({1: 1, 4: 1}) == pytest.approx(16 * 0.015 + 4 * 0.040)


async def test_one_sessions_short_chunks_are_charged_beside_the_others_batch() -> None:
    """Issue 37's unattacked case: one session's ``frames_per_chunk`` against the others' admission.
    A step costs the same whatever its chunk length (a fixed cost dominates, as tiny-world's at
    32x32); charged by its frames, a 1-frame session cost a quarter of a 4-frame one and was
    admitted beside a batch it then made late with a step of its own every frame."""
    model = ScriptedCostModel(base_s=0.12, per_tick_s=0.04)
    harness = harness_for(model)
    await harness.scheduler.start()
    try:
        await calibrate(harness.scheduler)  # both chunk lengths measured before any session
        assert harness.scheduler.admission.costs.estimate(1, 1) == pytest.approx(0.16, rel=0.1)
        for _ in range(8):  # one batch of eight: 440 ms, once a second (44%)
            harness.open(pacing="realtime", max_chunks_ahead=1000)
        with pytest.raises(CapacityExceeded) as refused:  # +4 steps of 160 ms a second: 108%
            harness.open(pacing="realtime", frames_per_chunk=1, max_chunks_ahead=1000)
        assert refused.value.code == "realtime_capacity"
        harness.open(pacing="realtime", max_chunks_ahead=1000)  # a ninth 4-frame one fits: 48%
    finally:
        await harness.scheduler.stop()


def test_unmeasured_batch_sizes_are_estimated_from_above() -> None:
    costs = StepCosts(fps=16)
    assert costs.estimate(4, 1) is None
    costs.record(4, 2, 0.10)
    assert costs.estimate(4, 1) == 0.10  # a smaller batch costs at most a larger one
    assert costs.estimate(4, 4) == pytest.approx(0.20)  # one size: in proportion
    costs.record(4, 3, 0.12)
    assert costs.estimate(4, 5) == pytest.approx(0.16)  # two sizes: along their line
    costs.record(4, 4, 0.11)  # noise: a batch measured cheaper than a smaller one
    assert costs.estimate(4, 6) == pytest.approx(0.11)  # never a falling line


def test_calibrated_sizes_follow_how_the_live_steps_compare_with_theirs() -> None:
    """A start beside another server's start measured every size twice as slow as it runs: the
    first live steps say so, and the sizes not yet stepped live are read at the live rate (else
    the slow start refused the second session for good: no live step of two ever came)."""
    costs = StepCosts(fps=16)
    for batch, seconds in ((1, 0.040), (2, 0.060), (4, 0.100)):
        costs.record(4, batch, seconds, calibration=True)
    assert costs.capacity(4, REALTIME_HEADROOM) == 9  # 9 in 200 ms, 4 times a second: 80%
    costs.record(4, 1, 0.020)  # live: half the calibration
    assert costs.estimate(4, 2) == pytest.approx(0.030)
    assert costs.estimate(4, 4) == pytest.approx(0.050)
    costs.record(4, 2, 0.090)  # a neighbour since: the live pair is 1.5x its calibration
    assert costs.estimate(4, 4) == pytest.approx(0.150)
    assert costs.estimate(4, 2) == pytest.approx(0.090)  # what is stepped live is read as it is
