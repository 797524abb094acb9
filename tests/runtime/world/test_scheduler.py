"""The world scheduler and runner: batching, KV pages, eviction isolated, pages freed on failure.

A test double stands in for a KV model here (the real KV model, tiny-world,
is tested with its own issue); it records the ticks it is given.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from livegen.errors import CapacityExceeded, StateEvicted
from livegen.models.room import game
from livegen.models.world import Chunk, Tick
from livegen.protocol import world as wire
from livegen.runtime.world.kv_pool import required_bytes
from livegen.runtime.world.runner import LEAD_FACTOR, LEAD_MARGIN_S, MAX_QUEUED_EVENTS, Options, Runner
from livegen.runtime.world.scheduler import Scheduler
from livegen.world import Event, Manager, Status
from runtime.world.harness import GEOMETRY, RunnerHarness, settled, until


class RecordingKVModel:
    """Echoes ticks with blank frames; can be told to forget a session or to fail."""

    name = "recording-kv"
    spec = game.room_spec(kv=GEOMETRY)

    def __init__(self) -> None:
        self.batches: list[list[Tick]] = []
        self.known: set[str] = set()
        self.is_failing = False

    def new_kv_storage(self, num_pages: int) -> list[int]:
        return [0] * num_pages

    def step(self, ticks: Sequence[Tick], kv_storage: Any) -> list[Chunk]:
        for tick in ticks:
            if tick.meta.chunk_index > 0 and tick.meta.session_id not in self.known:
                raise StateEvicted(f"no state for {tick.meta.session_id}")
        if self.is_failing:
            raise RuntimeError("the accelerator caught fire")
        self.batches.append(list(ticks))
        self.known.update(t.meta.session_id for t in ticks)
        frames = np.zeros((4, 32, 32, 3), np.uint8)
        return [Chunk(t.meta, frames) for t in ticks]

    def release(self, session_id: str) -> None:
        self.known.discard(session_id)


class Harness(RunnerHarness):
    def __init__(self, model: RecordingKVModel, num_sessions: int = 2) -> None:
        budget = required_bytes(GEOMETRY, 4, num_sessions)
        super().__init__(Scheduler(model, kv_budget_bytes=budget), model.spec.controls)
        self.model = model


async def test_due_sessions_step_together_with_their_kv_pages() -> None:
    harness = Harness(RecordingKVModel())
    await harness.scheduler.start()
    a = harness.open(max_chunks_ahead=3)
    b = harness.open(max_chunks_ahead=3)
    await until(lambda: a.session.chunk_index == 3 and b.session.chunk_index == 3)
    await harness.scheduler.stop()
    assert max(len(batch) for batch in harness.model.batches) == 2, "two due sessions share a step"
    for session_id in (a.session_id, b.session_id):
        ticks = [t for batch in harness.model.batches for t in batch if t.meta.session_id == session_id]
        assert [t.meta.chunk_index for t in ticks] == [0, 1, 2]
        assert ticks[0].context_pages == ()
        assert all(len(t.write_pages) == 4 for t in ticks)
        # sink_frames=1 then a window of 4: after chunk 0 the context is 1 sink + 3 window pages
        assert ticks[1].context_pages == (ticks[0].write_pages[0], *ticks[0].write_pages[1:])
        assert ticks[2].context_pages[0] == ticks[0].write_pages[0]
        assert ticks[2].context_pages[1:] == ticks[1].write_pages
    for batch in harness.model.batches:
        pages = [p for t in batch for p in (*t.context_pages, *t.write_pages)]
        assert len(pages) == len(set(pages)), "sessions of one batch never share a page"


async def test_eviction_fails_only_that_session_and_frees_its_pages() -> None:
    model = RecordingKVModel()
    harness = Harness(model)
    await harness.scheduler.start()
    a = harness.open(max_chunks_ahead=1)
    b = harness.open(max_chunks_ahead=1)
    await until(lambda: settled(a, 1) and settled(b, 1))
    model.release(a.session_id)
    a.ack(0)
    b.ack(0)
    await until(lambda: a.session.status is Status.FAILED and b.session.chunk_index == 2)
    await until(lambda: bool(harness.errors(a.session_id)))
    assert harness.errors(a.session_id)[0]["code"] == "state_evicted"
    assert harness.scheduler.pool is not None and harness.scheduler.pool.pages(a.session_id) == ()
    await a.reset()
    await until(lambda: a.session.chunk_index == 1)
    await harness.scheduler.stop()


async def test_a_failed_step_fails_its_sessions_and_frees_pages() -> None:
    model = RecordingKVModel()
    harness = Harness(model)
    await harness.scheduler.start()
    a = harness.open(max_chunks_ahead=1)
    await until(lambda: settled(a, 1))
    model.is_failing = True
    a.ack(0)
    await until(lambda: a.session.status is Status.FAILED)
    await until(lambda: bool(harness.errors(a.session_id)))
    assert harness.errors(a.session_id)[0]["code"] == "chunk_failed"
    assert harness.scheduler.pool.pages(a.session_id) == ()  # type: ignore[union-attr]
    await until(lambda: a.session_id not in model.known)
    await harness.scheduler.stop()


async def test_a_full_pool_refuses_new_sessions_until_one_closes() -> None:
    harness = Harness(RecordingKVModel(), num_sessions=1)
    await harness.scheduler.start()
    first = harness.open()
    with pytest.raises(CapacityExceeded) as error:
        harness.open()
    assert error.value.code == "kv_pool_full"
    await first.close()
    assert first.session.status is Status.CLOSED
    harness.open()
    await harness.scheduler.stop()


async def test_realtime_pacing_follows_the_media_clock() -> None:
    """Chunk k may start once chunk k-1 is due on screen: at anchor + (k-1) * 250 ms here."""
    now = [100.0]
    model = RecordingKVModel()
    scheduler = Scheduler(model, kv_budget_bytes=required_bytes(GEOMETRY, 4, 1), clock=lambda: now[0])
    manager = Manager(tracks=model.spec.controls, new_id=lambda: "x")

    async def discard(message: Any) -> None:
        pass

    runner = Runner(manager.create(), manager, scheduler, discard, discard, Options(max_chunks_ahead=8))
    scheduler.add(runner)
    for index in range(3):
        plan = runner.begin_tick(now[0])
        assert plan is not None and plan.meta.chunk_index == index
        [chunk] = model.step([Tick(plan.meta, 0, "", {})], None)
        runner.tick_done(plan, chunk, 1.0)
        deadline = 100.0 + index * 0.25
        assert runner.next_deadline() == pytest.approx(deadline)
        assert not runner.is_due(deadline - 0.001) and runner.is_due(deadline)
        now[0] = deadline
    runner.options = dataclasses.replace(runner.options, pacing="asap")
    assert runner.is_due(now[0]) and runner.next_deadline() is None
    runner.abort_sending()


async def test_a_start_ack_paces_the_next_chunk_to_the_clients_playback() -> None:
    """With acks at start, chunk k starts its measured step time (with margin) before the client
    needs it (chunk k-1's start plus its 250 ms), not as soon as chunk k-1 is due: the latest
    input gets in, and the chunk is still ready in time."""
    now = [100.0]
    model = RecordingKVModel()
    scheduler = Scheduler(model, kv_budget_bytes=required_bytes(GEOMETRY, 4, 1), clock=lambda: now[0])
    manager = Manager(tracks=model.spec.controls, new_id=lambda: "x")
    sent: list[Any] = []

    async def record(message: Any) -> None:
        sent.append(message)

    runner = Runner(manager.create(), manager, scheduler, record, record, Options(max_chunks_ahead=1))
    runner.start()
    plan = runner.begin_tick(now[0])
    assert plan is not None
    [chunk] = model.step([Tick(plan.meta, 0, "", {})], None)
    runner.tick_done(plan, chunk, 40.0)  # a 40 ms step
    await until(lambda: runner.sender.num_chunks_sent == 1)
    assert not runner.is_due(now[0] + 10)  # no credit before an ack
    now[0] = 100.5
    runner.ack(0, at="start")  # chunk 0's first frame shows at 100.5: chunk 1 is needed at 100.75
    lead = LEAD_FACTOR * 0.040 + LEAD_MARGIN_S  # the step's time, with margin
    assert runner.next_deadline() == pytest.approx(100.75 - lead)
    assert not runner.is_due(100.75 - lead - 0.001) and runner.is_due(100.75 - lead)
    assert runner.is_due(100.75 - lead - 0.01, early_s=0.01)  # the scheduler's batch window
    runner.abort_sending()


class TimedKVModel(RecordingKVModel):
    """Each tick of a step takes 100 ms on the scheduler's (fake) clock: 40% of a core per
    realtime session at 4 chunks a second."""

    def __init__(self, now: list[float], tick_s: Any = lambda step: 0.1) -> None:
        super().__init__()
        self.now = now
        #: Seconds per tick of the n-th step (from 0).
        self.tick_s = tick_s

    def step(self, ticks: Sequence[Tick], kv_storage: Any) -> list[Chunk]:
        self.now[0] += self.tick_s(len(self.batches)) * len(ticks)
        return super().step(ticks, kv_storage)


async def test_admission_refuses_a_session_the_frame_clock_cannot_hold() -> None:
    now = [100.0]
    model = TimedKVModel(now)
    harness = Harness(model, num_sessions=4)
    harness.scheduler.clock = lambda: now[0]
    await harness.scheduler.start()
    harness.open(max_chunks_ahead=2)  # asap: never charged, it measures the step
    await until(lambda: harness.scheduler.admission.costs.is_measured)
    assert harness.scheduler.admission.costs.estimate(4, 1) == pytest.approx(0.1)
    assert harness.scheduler.admission.worker_load(0, {4: 1}) == pytest.approx(0.4)
    harness.open(pacing="realtime", max_chunks_ahead=2)  # the first realtime one: admitted
    harness.open(pacing="realtime", max_chunks_ahead=2)  # two need 80% of the worker's time: admitted
    assert harness.scheduler.admission.is_realtime_full
    with pytest.raises(CapacityExceeded) as error:
        harness.open(pacing="realtime")  # three would need 120%
    assert error.value.code == "realtime_capacity"
    harness.open()  # an asap one still is: it uses what is left
    assert harness.scheduler.workers.kv_pools[0].num_sessions == 4  # the refused one holds nothing
    await harness.scheduler.stop()


@pytest.mark.parametrize(
    ("tick_s", "estimate"),
    [
        (lambda step: 0.3 if step == 5 else 0.1, 0.1),  # one slow step: a burst, not a capacity
        # a neighbour that stays, busy for three steps of every four: a lucky step is not the capacity
        (lambda step: 0.3 if step % 4 else 0.1, 0.3),
    ],
    ids=["burst", "sustained"],
)
async def test_admission_follows_a_sustained_slowdown_not_a_burst(tick_s: Any, estimate: float) -> None:
    now = [100.0]
    harness = Harness(TimedKVModel(now, tick_s), num_sessions=4)
    harness.scheduler.clock = lambda: now[0]
    await harness.scheduler.start()
    harness.open(max_chunks_ahead=40)
    await until(lambda: len(harness.model.batches) == 40)
    assert harness.scheduler.admission.costs.estimate(4, 1) == pytest.approx(estimate)
    harness.open(pacing="realtime", max_chunks_ahead=1)
    if estimate > 0.1:  # two sessions need 2 x 4 chunks/s x 0.3 s: more than the worker has
        with pytest.raises(CapacityExceeded):
            harness.open(pacing="realtime")
    else:
        harness.open(pacing="realtime")
    await harness.scheduler.stop()


async def test_a_client_that_does_not_read_is_flagged_not_buffered_forever() -> None:
    model = RecordingKVModel()
    scheduler = Scheduler(model, kv_budget_bytes=required_bytes(GEOMETRY, 4, 1))
    manager = Manager(tracks=model.spec.controls, new_id=lambda: "x")
    stuck = asyncio.Event()

    async def never_sends(message: Any) -> None:
        await stuck.wait()

    runner = Runner(manager.create(), manager, scheduler, never_sends, never_sends, Options())
    runner.start()
    for event_id in range(1, MAX_QUEUED_EVENTS + 10):
        runner.sender.send(wire.EventAccepted(event_id, "accepted", 0))
    assert runner.sender.is_overflowing
    runner.abort_sending()


async def test_a_bug_in_one_session_stops_only_that_session(monkeypatch: pytest.MonkeyPatch) -> None:
    harness = Harness(RecordingKVModel())
    await harness.scheduler.start()
    broken = harness.open(max_chunks_ahead=1)
    healthy = harness.open(max_chunks_ahead=8)
    await until(lambda: settled(broken, 1))

    def bug() -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(broken.session, "begin_tick", bug)
    broken.ack(0)
    await until(lambda: bool(harness.errors(broken.session_id)))
    assert harness.errors(broken.session_id)[0]["code"] == "internal_error"
    await until(lambda: healthy.session.chunk_index == 8)
    await broken.close()
    assert broken.session.status is Status.CLOSED
    await harness.scheduler.stop()


@dataclasses.dataclass
class Waiting:
    """A session that is never due, with a deadline far off."""

    deadline: float
    session_id: str = "waiting"
    is_realtime: bool = False

    def is_due(self, now: float, early_s: float = 0.0) -> bool:
        return False

    def next_deadline(self) -> float | None:
        return self.deadline


async def test_stopping_ends_the_loop_even_while_sessions_keep_waking_it() -> None:
    """Python 3.11's ``asyncio.wait_for`` swallows a cancel that lands as the awaited wake-up
    completes; the loop then ran on and ``stop`` never returned (a server that would not shut down)."""
    harness = Harness(RecordingKVModel())
    await harness.scheduler.start()
    harness.scheduler.add(Waiting(harness.scheduler.clock() + 60))  # the loop sleeps with a timeout

    async def keep_waking() -> None:
        while True:
            harness.scheduler.wake()
            await asyncio.sleep(0)

    waker = asyncio.create_task(keep_waking())
    await asyncio.sleep(0.01)
    stopping = asyncio.create_task(harness.scheduler.stop())
    done, _ = await asyncio.wait([stopping], timeout=5)
    waker.cancel()  # with the wake-ups gone, a loop that ran on is cancelled at teardown
    assert stopping in done, "stop() did not return: the loop swallowed its cancel"


class PoisonedKVModel(RecordingKVModel):
    """Raises for a whole batch when any tick runs under the prompt ``poison``: one session's input
    the model cannot take (issue 30: a mouse motion no float holds, batched with others)."""

    def __init__(self) -> None:
        super().__init__()
        #: Every batch the model was asked to step, whether it raised or not.
        self.attempts: list[list[Tick]] = []

    def step(self, ticks: Sequence[Tick], kv_storage: Any) -> list[Chunk]:
        self.attempts.append(list(ticks))
        if any(tick.prompt == "poison" for tick in ticks):
            raise OverflowError("int too large to convert to float")
        return super().step(ticks, kv_storage)


async def test_a_step_failed_by_one_sessions_input_fails_only_that_session() -> None:
    model = PoisonedKVModel()
    harness = Harness(model, num_sessions=4)
    await harness.scheduler.start()
    runners = [harness.open(max_chunks_ahead=1) for _ in range(4)]
    # chunk 0 written and settled: each runner is due again as soon as it is acked
    await until(lambda: all(settled(r, 1) for r in runners))
    culprit, *others = runners
    culprit.accept(Event.of(1, prompt="poison"))
    for runner in runners:  # all due at once: one batch of four
        runner.ack(0)
    await until(lambda: culprit.session.status is Status.FAILED)
    await until(lambda: all(len(harness.chunks(r.session_id)) == 2 for r in others))
    at = next(i for i, batch in enumerate(model.attempts) if any(t.prompt == "poison" for t in batch))
    failed = model.attempts[at]
    assert {t.meta.session_id for t in failed} == {r.session_id for r in runners}, model.attempts
    assert [e["code"] for e in harness.errors(culprit.session_id)] == ["chunk_failed"]
    assert "int too large" in harness.errors(culprit.session_id)[0]["message"]
    for runner in others:
        assert harness.errors(runner.session_id) == []
        # The same transaction, stepped apart: the tick the failed batch held is the one committed.
        tick = next(t for t in failed if t.meta.session_id == runner.session_id)
        assert harness.chunks(runner.session_id)[1]["request_id"] == tick.meta.request_id
    assert all(len(batch) < 4 for batch in model.attempts[at + 1 :]), "stepped apart, in halves"
    await culprit.reset()
    await until(lambda: culprit.session.chunk_index == 1)
    await harness.scheduler.stop()
