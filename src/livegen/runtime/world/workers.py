"""World workers: where model calls run, and the pool that sends each session's calls to one.

A ``Worker`` owns one copy of the model and that copy's KV storage, and runs
its calls (steps and releases) one at a time, in submission order, so a
release always lands between steps, never during one. ``LocalWorker`` is the
default: the model in this process, one dedicated thread. ``RayWorker``
(``cluster/world_actors.py``) is the same contract in a Ray actor, for when one machine
is not enough.

The ``WorkerPool`` owns the workers' calls and KV pages, its ``Placement``
(``placement.py``) which worker holds which session, the scheduler
(``scheduler.py``) owns the loop and the runners own their sessions. A
session's state lives in the worker that stepped it, so its ticks go there
(session affinity). A rollout's first chunk (a new session, or after a reset)
needs no state, so it goes to the least loaded worker, which may move the
session. Each worker has its own paged KV pool (``kv_pool.py``), sized by
the per-worker budget, because its pages index its own tensors. Releases (reset, close, failure,
disconnect) fan out to every worker that ever held the session: releasing is
idempotent, and a worker whose earlier release failed gets another chance.
A worker that is lost (its process died) takes no new rollouts: its sessions
fail, and move to a live worker on their ``world.reset``.

In a cluster of server processes the workers are the cluster's shared world
services (``cluster/world.py``): their pages and admissions are the service's, so the
pool keeps no KV pool for them, admits a session with an awaited call
(``reserve``) before its runner starts, and never moves a session between them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar, cast

from livegen.errors import CapacityExceeded, LocalProtocolError, StateEvicted
from livegen.models.registry import ModelInfo
from livegen.models.world import Chunk, Tick, WorldModel, WorldSpec
from livegen.runtime.world.kv_pool import Pool
from livegen.runtime.world.placement import Placement, Slot

T = TypeVar("T")
#: A page a shared service names (``cluster/world.py``): a tick to one carries one per page to write.
UNNAMED_PAGE = -1


class WorkerRestarted(StateEvicted):
    """A worker's process died and was restarted (a cluster's shared world service): the steps it
    was serving fail, every session of them at once, and their state is gone until ``world.reset``."""


class Worker(Protocol):
    """One copy of a world model and its KV storage, stepping batches in order."""

    #: Shown in logs and health, e.g. ``local`` or ``ray-1``.
    name: str
    spec: WorldSpec
    #: False once the worker is lost for good (e.g. its process died); it gets no new sessions.
    is_alive: bool

    async def start(self, num_kv_pages: int | None) -> None:
        """Allocate the KV storage (``None``: the model declares no KV geometry)."""
        ...

    async def step(self, ticks: Sequence[Tick]) -> list[Chunk]: ...

    async def release(self, session_id: str) -> None: ...

    async def close(self) -> None: ...


class LocalWorker:
    """The model in this process; its calls run in one dedicated thread, in order."""

    def __init__(self, model: WorldModel, name: str = "local") -> None:
        self.model = model
        self.name = name
        self.spec = model.spec
        self.is_alive = True
        self.kv_storage: Any = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="livegen-world")

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def start(self, num_kv_pages: int | None) -> None:
        if num_kv_pages is not None:
            self.kv_storage = await self.call(self.model.new_kv_storage, num_kv_pages)

    async def step(self, ticks: Sequence[Tick]) -> list[Chunk]:
        return await self.call(self.model.step, list(ticks), self.kv_storage)

    async def release(self, session_id: str) -> None:
        await self.call(self.model.release, session_id)

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class WorkerPool:
    """Runs the workers' calls, plans their KV pages and fans releases out; where each session
    is placed is its ``Placement``'s (``placement.py``)."""

    def __init__(self, workers: Sequence[Worker], kv_budget_bytes: int) -> None:
        if not workers:
            raise ValueError("a worker pool needs at least one worker")
        self.spec = workers[0].spec
        kv = self.spec.kv and not getattr(workers[0], "is_shared", False)  # a service pages its own
        slots = [
            Slot(worker, Pool.for_spec(self.spec, kv_budget_bytes) if kv else None) for worker in workers
        ]
        #: The workers are a cluster's shared services: they admit and page sessions themselves.
        self.is_shared = all(getattr(worker, "is_shared", False) for worker in workers)
        #: Which slot holds which session, and where a rollout's first chunk goes.
        self.placement: Placement[Worker] = Placement(slots, is_shared=self.is_shared)
        self._slots = slots
        #: Session id -> slots that ever held its model state (were sent one of its ticks).
        self._holders: dict[str, set[int]] = {}

    @property
    def workers(self) -> list[Worker]:
        return [slot.worker for slot in self._slots]

    @property
    def kv_pools(self) -> list[Pool]:
        return [slot.kv for slot in self._slots if slot.kv is not None]

    @property
    def num_sessions(self) -> int:
        return self.placement.num_sessions

    @property
    def kv_capacity(self) -> int | None:
        """Sessions the KV pools admit in all, or None for models without KV geometry."""
        usage = self.kv_usage()
        return None if usage is None else usage[1]

    def kv_usage(self) -> tuple[int, int] | None:
        """(sessions admitted, capacity) of the KV pools, or None without KV geometry; a shared
        service's as its last answer said (every process's sessions)."""
        if self.is_shared:
            shared = self._shared()
            if any(worker.capacity is None for worker in shared):
                return None
            return sum(w.num_sessions for w in shared), sum(w.capacity or 0 for w in shared)
        pools = self.kv_pools
        return (sum(p.num_sessions for p in pools), sum(p.capacity for p in pools)) if pools else None

    def refresh(self) -> None:
        """Shared services: ask for their counts again where the last answer is old (not awaited)."""
        if self.is_shared:
            for worker in self._shared():
                worker.refresh()

    def _shared(self) -> list[SharedWorker]:
        return [cast("SharedWorker", slot.worker) for slot in self._slots]

    @property
    def is_full(self) -> bool:
        """No live worker can take another session."""
        return self.placement.is_full

    @property
    def lost_workers(self) -> list[str]:
        return [slot.worker.name for slot in self._slots if not slot.worker.is_alive]

    async def start(self) -> None:
        await asyncio.gather(
            *(slot.worker.start(slot.kv.num_pages if slot.kv else None) for slot in self._slots)
        )

    async def close(self) -> None:
        await asyncio.gather(*(slot.worker.close() for slot in self._slots), return_exceptions=True)

    # -- placement -------------------------------------------------------------------------
    def admit(self, session_id: str) -> None:
        """Place a new session on the least loaded worker (``CapacityExceeded`` when all are full)."""
        if session_id in self.placement:
            return
        if self.is_shared:
            raise LocalProtocolError(f"session {session_id!r} was not reserved on a shared world service")
        self.placement.admit(session_id)

    async def reserve(self, session_id: str) -> None:
        """Admit a new session to a shared service, the least loaded first (awaited: it asks the
        services); nothing for workers of this process, which ``admit`` places at once."""
        if not self.is_shared or session_id in self.placement:
            return
        shared = self._shared()
        refusal: Exception | None = None
        for index in sorted(range(len(shared)), key=lambda i: shared[i].num_sessions):
            try:
                await shared[index].admit(session_id)
            except (CapacityExceeded, WorkerRestarted) as exc:
                refusal = exc
                continue
            except asyncio.CancelledError:  # the service may have admitted it: take that back
                shared[index].forget(session_id)
                raise
            self.placement.put(session_id, index)
            return
        if isinstance(refusal, CapacityExceeded):
            raise refusal
        raise CapacityExceeded(f"no world service is running: {refusal}; retry shortly", code="no_workers")

    def remove(self, session_id: str) -> None:
        """The session left (close, disconnect) after its release: forget it."""
        self._holders.pop(session_id, None)
        self.placement.remove(session_id)

    def worker_index(self, session_id: str) -> int:
        return self.placement.index(session_id)

    def holders(self, session_id: str) -> set[int]:
        """Indices of the workers that ever held this session's model state."""
        return set(self._holders.get(session_id, ()))

    def place(self, session_id: str, index: int) -> None:
        """Place a session on worker ``index`` where it stays (calibration's stand-ins)."""
        self.placement.place(session_id, index)

    # -- ticks -----------------------------------------------------------------------------
    def plan(
        self, session_id: str, chunk_index: int, pages: int | None = None
    ) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        """(worker index, context pages, pages to write) for the session's next tick (of ``pages``
        pages where the session's chunks are shorter than the model's)."""
        index = self.placement.for_chunk(session_id, chunk_index)
        self._holders.setdefault(session_id, set()).add(index)
        if self.is_shared:  # the service names the pages: the tick says how many
            count = pages or self.spec.pages_in_chunk(chunk_index)
            return index, (), (UNNAMED_PAGE,) * count if self.spec.kv is not None else ()
        kv = self._slots[index].kv
        context, write = kv.plan(session_id, chunk_index, pages) if kv is not None else ((), ())
        return index, context, write

    def commit(self, session_id: str) -> None:
        kv = self._slots[self.worker_index(session_id)].kv
        if kv is not None:
            kv.commit(session_id)

    def clear(self, session_id: str) -> None:
        """Free the session's KV pages (failure, reset); it stays placed."""
        index = self.placement.get(session_id)
        kv = self._slots[index].kv if index is not None else None
        if kv is not None:
            kv.clear(session_id)

    async def step(self, index: int, ticks: Sequence[Tick]) -> list[Chunk]:
        return await self._slots[index].worker.step(ticks)

    async def release(self, session_id: str) -> None:
        """Free the session's KV pages and forget its state on every worker that ever held it.

        Raises the first failure once every worker has been asked.
        """
        self.clear(session_id)
        holders = sorted(self._holders.get(session_id, ()))
        placed = self.placement.get(session_id)
        if not holders and placed is not None:
            holders = [placed]  # a release with no step yet: tell its worker anyway
        results = await asyncio.gather(
            *(self._slots[i].worker.release(session_id) for i in holders), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result


class SharedWorker(Worker, Protocol):
    """A worker that is one of a cluster's shared services (``cluster/world.py``): it pages and
    admits sessions itself, for every process, and the pool reads its counts."""

    is_shared: bool
    #: The service's sessions (of every process) and capacity, as its last answer said.
    num_sessions: int
    capacity: int | None

    @property
    def is_full(self) -> bool: ...

    async def admit(self, session_id: str) -> None: ...

    def forget(self, session_id: str) -> None: ...

    def refresh(self) -> None: ...


class WorkerSource(Protocol):
    """Workers that run the model outside this process, chosen once from the configuration
    (``cluster/services.py``): ``--world-workers`` Ray actors (``cluster/world_actors.py``) or a
    cluster's shared services (``cluster/world.py``). None in the settings: the model runs here."""

    async def start(self, entry: ModelInfo, options: Mapping[str, Any], kv_budget_bytes: int) -> list[Worker]:
        """The workers, each with its model loaded (waited for)."""
        ...

    async def close(self) -> None:
        """Let the workers go (the engine stopped)."""
        ...


__all__ = [
    "UNNAMED_PAGE",
    "LocalWorker",
    "SharedWorker",
    "Worker",
    "WorkerPool",
    "WorkerRestarted",
    "WorkerSource",
]
