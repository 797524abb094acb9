"""The worker pool: session affinity, least-loaded placement, per-worker KV pools, release fan-out.

Test doubles stand in for workers here (each its own copy of a small KV
model that remembers which sessions it holds); the scheduler, runners,
session cores and KV pools are the real ones. The real Ray workers are
tested over the real server in ``test_workers_ray.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest

from livegen.errors import CapacityExceeded, LocalProtocolError, StateEvicted
from livegen.models.room import game
from livegen.models.world import Chunk, Tick, TickMeta
from livegen.runtime.world.kv_pool import required_bytes
from livegen.runtime.world.scheduler import Scheduler
from livegen.runtime.world.workers import WorkerPool
from livegen.world import Status
from runtime.world.harness import GEOMETRY, RunnerHarness, settled, until

SPEC = game.room_spec(kv=GEOMETRY)


class FakeWorker:
    """A worker double: records the sessions of each step and each release; can be told to fail."""

    spec = SPEC

    def __init__(self, name: str) -> None:
        self.name = name
        self.is_alive = True
        self.steps: list[list[str]] = []
        self.releases: list[str] = []
        #: Sessions whose state this worker holds (stepped, not released since).
        self.held: set[str] = set()
        self.num_kv_pages: int | None = None
        self.is_failing_steps = False
        self.is_failing_releases = False
        self.is_closed = False
        #: While set and clear, steps wait for it: a slow worker.
        self.gate: asyncio.Event | None = None

    async def start(self, num_kv_pages: int | None) -> None:
        self.num_kv_pages = num_kv_pages

    async def step(self, ticks: Sequence[Tick]) -> list[Chunk]:
        await asyncio.sleep(0)  # another worker's step may run meanwhile, as on a real remote one
        if self.gate is not None:
            await self.gate.wait()
        for tick in ticks:
            if tick.meta.chunk_index > 0 and tick.meta.session_id not in self.held:
                raise StateEvicted(f"{self.name} holds no state for {tick.meta.session_id}")
        if self.is_failing_steps:
            raise RuntimeError(f"{self.name} lost its accelerator")
        self.steps.append([tick.meta.session_id for tick in ticks])
        self.held.update(tick.meta.session_id for tick in ticks)
        frames = np.zeros((SPEC.frames_per_chunk, SPEC.height, SPEC.width, 3), np.uint8)
        return [Chunk(tick.meta, frames) for tick in ticks]

    async def release(self, session_id: str) -> None:
        self.releases.append(session_id)
        if self.is_failing_releases:
            raise ConnectionError(f"{self.name} is unreachable")
        self.held.discard(session_id)

    async def close(self) -> None:
        self.is_closed = True

    def stepped(self) -> set[str]:
        return {session_id for batch in self.steps for session_id in batch}


class Harness(RunnerHarness):
    def __init__(self, num_workers: int = 2, sessions_per_worker: int = 4) -> None:
        self.workers = [FakeWorker(f"w{i}") for i in range(num_workers)]
        budget = required_bytes(GEOMETRY, SPEC.frames_per_chunk, sessions_per_worker)
        super().__init__(Scheduler(workers=self.workers, kv_budget_bytes=budget), SPEC.controls)

    def kv_pages(self, session_id: str) -> list[tuple[int, ...]]:
        """The session's pages in each worker's KV pool (empty where it is not admitted)."""
        pages = []
        for pool in self.scheduler.workers.kv_pools:
            try:
                pages.append(pool.pages(session_id))
            except LocalProtocolError:  # not admitted there
                pages.append(())
        return pages


async def test_new_sessions_go_to_the_least_loaded_worker_and_their_ticks_stay_there() -> None:
    harness = Harness()
    await harness.scheduler.start()
    assert [w.num_kv_pages for w in harness.workers] == [
        p.num_pages for p in harness.scheduler.workers.kv_pools
    ]
    a, b, c = (harness.open(max_chunks_ahead=3) for _ in range(3))
    await until(lambda: all(r.session.chunk_index == 3 for r in (a, b, c)))
    w0, w1 = harness.workers
    assert w0.stepped() == {a.session_id, c.session_id}
    assert w1.stepped() == {b.session_id}
    assert max(len(batch) for batch in w0.steps) == 2, "sessions of one worker share its step"
    # Each session's KV pages live in its own worker's pool, and nowhere else.
    assert [bool(pages) for pages in harness.kv_pages(a.session_id)] == [True, False]
    assert [bool(pages) for pages in harness.kv_pages(b.session_id)] == [False, True]
    await harness.scheduler.stop()
    assert all(w.is_closed for w in harness.workers)


async def test_a_slow_worker_holds_up_no_other_and_its_sessions_join_its_next_batch() -> None:
    harness = Harness()
    w0 = harness.workers[0]
    w0.gate = asyncio.Event()  # w0's first step does not finish until the gate opens
    await harness.scheduler.start()
    a, b = harness.open(max_chunks_ahead=8), harness.open(max_chunks_ahead=8)
    await until(lambda: b.session.chunk_index >= 1)  # a's first step is in flight on w0 by now
    c = harness.open(max_chunks_ahead=8)  # placed on w0, which is busy: it waits for w0's next batch
    await until(lambda: b.session.chunk_index == 8)
    assert a.session.chunk_index == 0 and c.session.chunk_index == 0 and w0.steps == []
    w0.gate.set()
    await until(lambda: a.session.chunk_index == 8 and c.session.chunk_index == 8)
    assert w0.steps[0] == [a.session_id], "the step that was in flight"
    assert sorted(w0.steps[1]) == sorted([a.session_id, c.session_id]), "c joined a's next batch"
    await harness.scheduler.stop()


async def test_the_workers_kv_pools_admit_their_sum_then_refuse_cleanly() -> None:
    harness = Harness(num_workers=2, sessions_per_worker=1)
    await harness.scheduler.start()
    assert harness.scheduler.workers.kv_capacity == 2
    first, second = harness.open(), harness.open()
    assert harness.scheduler.workers.is_full
    with pytest.raises(CapacityExceeded) as error:
        harness.open()
    assert error.value.code == "kv_pool_full"
    await first.close()
    assert not harness.scheduler.workers.is_full
    third = harness.open(max_chunks_ahead=1)
    await until(lambda: third.session.chunk_index == 1)
    assert third.session_id in harness.workers[0].stepped(), "the freed worker takes the new session"
    await second.close()
    await harness.scheduler.stop()


async def test_a_reset_session_moves_to_the_least_loaded_worker_and_close_releases_it_everywhere() -> None:
    harness = Harness()
    await harness.scheduler.start()
    a, b, c = (harness.open(max_chunks_ahead=2) for _ in range(3))
    # written and settled: an ack of a chunk not yet written counts for nothing (W7)
    await until(lambda: all(r.session.chunk_index == 2 and not r.flow.unsent for r in (a, b, c)))
    w0, w1 = harness.workers
    assert c.session_id in w0.held
    await b.close()
    assert w1.releases == [b.session_id] and w0.releases == []
    c.ack(1)  # mid-rollout, c stays with its state on w0 although w1 is now idle
    await until(lambda: c.session.chunk_index == 4)
    assert c.session_id not in w1.stepped() and harness.error_codes(c.session_id) == []
    await c.reset()  # c's state is gone everywhere; its next rollout goes to the idle worker
    assert w0.releases == [c.session_id] and c.session_id not in w0.held
    await until(lambda: c.session.chunk_index == 2)
    assert c.session_id in w1.held and c.session_id not in w0.held
    assert harness.scheduler.workers.holders(c.session_id) == {0, 1}
    assert [bool(pages) for pages in harness.kv_pages(c.session_id)] == [False, True]
    await c.close()
    assert c.session.status is Status.CLOSED
    assert w0.releases.count(c.session_id) == 2 and w1.releases.count(c.session_id) == 1
    assert all(c.session_id not in w.held for w in harness.workers)
    assert harness.kv_pages(c.session_id) == [(), ()]
    assert harness.scheduler.workers.holders(c.session_id) == set()
    assert a.session.chunk_index == 2 and a.session_id in w0.held, "the other sessions are untouched"
    await harness.scheduler.stop()


async def test_a_failing_worker_fails_only_its_own_sessions() -> None:
    harness = Harness()
    await harness.scheduler.start()
    a = harness.open(max_chunks_ahead=1)
    b = harness.open(max_chunks_ahead=50)
    await until(lambda: settled(a, 1) and b.session.chunk_index >= 1)
    harness.workers[0].is_failing_steps = True
    a.ack(0)
    await until(lambda: a.session.status is Status.FAILED)
    await until(lambda: bool(harness.error_codes(a.session_id)))
    assert harness.error_codes(a.session_id) == ["chunk_failed"]
    await until(lambda: a.session_id in harness.workers[0].releases)  # the failure releases its state
    await until(lambda: b.session.chunk_index == 50)
    assert harness.error_codes(b.session_id) == [] and b.session.status is Status.ACTIVE
    await harness.scheduler.stop()


async def test_a_lost_worker_gets_no_new_rollouts_and_its_sessions_move_on_reset() -> None:
    harness = Harness()
    await harness.scheduler.start()
    a = harness.open(max_chunks_ahead=1)
    b = harness.open(max_chunks_ahead=1)
    await until(lambda: settled(a, 1) and settled(b, 1))
    w0, w1 = harness.workers
    assert b.session_id in w1.held
    w1.is_alive, w1.is_failing_steps = False, True  # its process died
    b.ack(0)
    await until(lambda: harness.error_codes(b.session_id) == ["chunk_failed"])
    c = harness.open(max_chunks_ahead=1)
    await until(lambda: c.session.chunk_index == 1)
    assert c.session_id in w0.held, "a new session goes to a live worker, however loaded"
    await b.reset()
    await until(lambda: b.session.chunk_index == 1)
    assert b.session_id in w0.held and b.session.status is Status.ACTIVE
    assert harness.scheduler.workers.lost_workers == ["w1"] and not harness.scheduler.workers.is_full
    w0.is_alive = False
    assert harness.scheduler.workers.is_full
    with pytest.raises(CapacityExceeded) as error:
        harness.open()
    assert error.value.code == "no_workers"
    await harness.scheduler.stop()


async def test_a_release_reaches_every_worker_even_when_one_fails_and_retries_reach_it_again() -> None:
    workers = [FakeWorker("w0"), FakeWorker("w1")]
    pool = WorkerPool(workers, required_bytes(GEOMETRY, SPEC.frames_per_chunk, 2))
    await pool.start()

    async def roll(session_id: str, num_chunks: int) -> int:
        for chunk_index in range(num_chunks):
            index, context, write = pool.plan(session_id, chunk_index)
            meta = TickMeta(session_id, f"r{chunk_index}", chunk_index, ())
            await pool.step(index, [Tick(meta, 0, "", {}, context, write)])
            pool.commit(session_id)
        return index

    for session_id in ("x", "y", "z"):
        pool.admit(session_id)
    assert [pool.worker_index(s) for s in ("x", "y", "z")] == [0, 1, 0]
    assert await roll("x", 2) == 0
    pool.remove("y")  # w1 is now idle: x's next rollout moves there
    await pool.release("x")
    assert await roll("x", 2) == 1
    workers[0].is_failing_releases = True
    with pytest.raises(ConnectionError):
        await pool.release("x")
    assert "x" not in workers[1].held, "the healthy worker released despite the other's failure"
    assert pool.holders("x") == {0, 1}
    workers[0].is_failing_releases = False
    await pool.release("x")
    assert workers[0].releases == ["x", "x", "x"] and workers[1].releases == ["x", "x"]
    pool.remove("x")
    pool.remove("z")
    assert pool.num_sessions == 0 and all(p.num_sessions == 0 for p in pool.kv_pools)
