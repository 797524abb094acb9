"""The worker pool over a cluster's shared world services (``cluster/world.py``): admission is the
service's, awaited at creation; the service names the pages; a restarted service fails its step.

Test doubles stand in for the services (each admits up to its capacity, as ``WorldHost`` does for
every process); the scheduler, runners, session cores are the real ones. The real services are
tested over two real server processes in ``tests/server/test_cluster_world.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest

from livegen.errors import CapacityExceeded, LocalProtocolError
from livegen.models.room import game
from livegen.models.world import Chunk, Tick
from livegen.runtime.world.runner import Runner
from livegen.runtime.world.scheduler import Scheduler
from livegen.runtime.world.workers import UNNAMED_PAGE, WorkerRestarted
from livegen.world import Manager, Status

from .harness import GEOMETRY, RunnerHarness, settled, until

SPEC = game.room_spec(kv=GEOMETRY)


class FakeService:
    """A shared service double: admits ``capacity`` sessions of any process, records steps."""

    spec = SPEC
    is_shared = True

    def __init__(self, name: str, capacity: int) -> None:
        self.name, self.capacity = name, capacity
        self.is_alive = True
        self.admitted: set[str] = set()
        self.steps: list[list[Tick]] = []
        self.is_restarting = False
        #: While set and clear, an admission's answer waits for it (the service admitted already).
        self.answer: asyncio.Event | None = None

    @property
    def num_sessions(self) -> int:
        return len(self.admitted)

    @property
    def is_full(self) -> bool:
        return self.num_sessions >= self.capacity

    async def start(self, num_kv_pages: int | None) -> None:
        assert num_kv_pages is None, "a service pages its own KV storage"

    async def admit(self, session_id: str) -> None:
        await asyncio.sleep(0)  # an awaited call, as to a real actor
        if self.is_full:
            raise CapacityExceeded(f"{self.name} is full", code="kv_pool_full")
        self.admitted.add(session_id)
        if self.answer is not None:
            await self.answer.wait()

    async def step(self, ticks: Sequence[Tick]) -> list[Chunk]:
        await asyncio.sleep(0)
        self.steps.append(list(ticks))
        if self.is_restarting:
            raise WorkerRestarted(f"{self.name} died; send world.reset")
        frames = np.zeros((SPEC.frames_per_chunk, SPEC.height, SPEC.width, 3), np.uint8)
        return [Chunk(tick.meta, frames) for tick in ticks]

    async def release(self, session_id: str) -> None:
        pass

    def forget(self, session_id: str) -> None:
        self.admitted.discard(session_id)

    def refresh(self) -> None:
        pass

    async def close(self) -> None:
        pass


class Harness(RunnerHarness):
    def __init__(self, *capacities: int) -> None:
        self.services = [FakeService(f"svc{i}", capacity) for i, capacity in enumerate(capacities)]
        super().__init__(Scheduler(workers=self.services), SPEC.controls)
        self.next_id = ""
        self.manager = Manager(tracks=SPEC.controls, new_id=lambda: self.next_id)

    async def admit(self, **options: object) -> Runner:
        """A session as the engine opens one: reserved at the service, then started."""
        self.next_id = f"s{len(self.sent)}"
        await self.scheduler.reserve(self.next_id)
        return self.open(**options)


async def test_sessions_are_admitted_by_the_services_which_name_their_pages() -> None:
    harness = Harness(1, 1)
    await harness.scheduler.start()
    pool = harness.scheduler.workers
    assert pool.is_shared and pool.kv_pools == []
    with pytest.raises(LocalProtocolError):  # never admitted without the service's word
        pool.admit("unreserved")
    a, b = await harness.admit(max_chunks_ahead=2), await harness.admit(max_chunks_ahead=2)
    svc0, svc1 = harness.services
    assert svc0.admitted == {"s0"} and svc1.admitted == {"s1"}
    assert pool.kv_usage() == (2, 2) and pool.is_full
    with pytest.raises(CapacityExceeded) as refused:  # every service is full: refused at creation
        await harness.scheduler.reserve("s2")
    assert refused.value.code == "kv_pool_full"
    await until(lambda: len(svc0.steps) >= 2)
    tick = svc0.steps[0][0]
    assert tick.context_pages == () and tick.write_pages == (UNNAMED_PAGE,) * SPEC.pages_in_chunk(0)
    await a.reset()  # a new rollout stays on the service that admitted it
    await until(lambda: a.session.chunk_index == 2)
    assert all(t.meta.session_id != a.session_id for step in svc1.steps for t in step)
    await b.close()
    assert svc1.admitted == set() and not pool.is_full  # its admission went back
    await harness.scheduler.stop()


async def test_a_restarted_service_fails_every_session_of_its_step_without_bisecting() -> None:
    harness = Harness(4)
    await harness.scheduler.start()
    (service,) = harness.services
    runners = [await harness.admit(max_chunks_ahead=1) for _ in range(3)]
    await until(lambda: all(settled(r, 1) for r in runners))  # written: an ack then counts
    service.is_restarting = True
    steps_before = len(service.steps)
    for runner in runners:
        runner.ack(0)
    await until(lambda: all(harness.error_codes(r.session_id) == ["state_evicted"] for r in runners))
    assert len(service.steps) == steps_before + 1, "one failed step fails them all at once"
    service.is_restarting = False
    for runner in runners:
        await runner.reset()
    await until(lambda: all(r.session.chunk_index == 1 for r in runners))
    assert all(r.session.status is Status.ACTIVE for r in runners)
    await harness.scheduler.stop()


async def test_a_creation_cancelled_while_the_service_admits_takes_the_admission_back() -> None:
    harness = Harness(1)
    (service,) = harness.services
    service.answer = asyncio.Event()
    reserving = asyncio.ensure_future(harness.scheduler.reserve("s0"))
    await until(lambda: service.admitted == {"s0"})
    reserving.cancel()  # the client left while its session.update was being admitted
    with pytest.raises(asyncio.CancelledError):
        await reserving
    assert service.admitted == set() and not harness.scheduler.workers.is_full
