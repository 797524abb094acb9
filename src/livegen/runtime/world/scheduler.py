"""The world scheduler: one loop that steps every due session together, in one batch.

It owns the loop, the admission (``admission.py``) and the worker pool
(``workers.py``: which worker holds which session's state, and each worker's
KV pages); runners
(``world_runner.py``) own their sessions and say when they are due (pacing
deadline, flow-control credit). Each round the scheduler asks every due runner
for its plan, fills in KV pages for models that declare geometry, runs
``model.step`` once per worker for that worker's share of the batch, and
hands each chunk (or failure) back to its runner. Workers step independently:
a worker's sessions wait while it is busy (to join its next batch, not queue
behind it one by one), while a free worker takes its due sessions at once, so
a slow worker never holds up the others. A
step that raises is isolated by bisection: its ticks are stepped again in
halves, and halves of the halves that raise, down to single ticks, so only the
session whose tick fails alone fails (``state_evicted`` where its state is
gone, upstream gap 3, never a silent restart; else ``chunk_failed``), and the
others get their chunks from the smaller steps, the same frames a batch gives
(W6). One client's input the model cannot take (issue 30: a mouse motion no
float holds) no longer fails every session batched with it.

Admission (``admission.py``) owns what a batch costs and whether one more
realtime session fits (issue 39): every step's time is recorded there by its
chunk length and batch size, the loop asks it which due ``asap`` sessions may
step now, and ``add`` and ``reserve`` ask it before placing a realtime session.

By default there is one worker, in this process (``LocalWorker``); each worker
runs its model calls in submission order, so a release always lands between
steps, never during one. A worker that died and was restarted (a cluster's
shared world service, ``cluster/world.py``) fails its whole step with
``state_evicted``, without bisection: every session of it lost its state.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from livegen.errors import LivegenError, StateEvicted
from livegen.logs import log_event
from livegen.models.world import Chunk, Tick, WorldModel
from livegen.runtime.world.admission import REALTIME_HEADROOM, Admission, Admitted
from livegen.runtime.world.kv_pool import Pool
from livegen.runtime.world.workers import LocalWorker, Worker, WorkerPool, WorkerRestarted
from livegen.tasks import TaskSet
from livegen.world import Plan

logger = logging.getLogger("livegen.world")

#: Default KV budget for models with KV geometry: enough for a laptop.
DEFAULT_KV_BUDGET_BYTES = 512 * 1024 * 1024


class Steppable(Admitted, Protocol):
    """What the scheduler needs of a runner: what admission reads, and its ticks."""

    def is_due(self, now: float, early_s: float = 0.0) -> bool: ...
    def next_deadline(self) -> float | None: ...
    def begin_tick(self, now: float, early_s: float = 0.0) -> Plan | None: ...
    def tick_done(self, plan: Plan, chunk: Chunk, model_ms: float) -> None: ...
    def tick_failed(self, plan: Plan, code: str, message: str) -> None: ...
    def crashed(self, message: str) -> None: ...


@dataclass
class _Entry:
    runner: Steppable
    plan: Plan
    tick: Tick
    worker_index: int = 0


class Scheduler:
    def __init__(
        self,
        model: WorldModel | None = None,
        *,
        workers: Sequence[Worker] = (),
        kv_budget_bytes: int = DEFAULT_KV_BUDGET_BYTES,
        clock: Callable[[], float] = time.monotonic,
        realtime_headroom: float = REALTIME_HEADROOM,
    ) -> None:
        """Step ``model`` in this process, or step on ``workers`` (each with its own KV budget)."""
        if model is not None:
            workers = [LocalWorker(model), *workers]
        self.workers = WorkerPool(workers, kv_budget_bytes)
        self.spec = self.workers.spec
        self.clock = clock
        self._runners: dict[str, Steppable] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: The loop's task and the steps in flight, cancelled and awaited by ``stop``.
        self._tasks = TaskSet()
        #: Worker index -> steps in flight there.
        self._busy: collections.Counter[int] = collections.Counter()
        self.num_steps = 0
        self.num_ticks = 0
        #: The last step's seconds: a session due within it joins this round's batch rather than
        #: waiting behind it for the next (one batched step costs less than two in a row).
        self.batch_window_s = 0.0
        #: Step costs, the realtime headroom and the media-clock phases (``admission.py``).
        self.admission = Admission(self._runners, self.workers, self.spec, realtime_headroom)

    @property
    def num_sessions(self) -> int:
        return len(self._runners)

    @property
    def pool(self) -> Pool | None:
        """The first worker's KV pool (the only one in process), or None without KV geometry."""
        pools = self.workers.kv_pools
        return pools[0] if pools else None

    async def start(self) -> None:
        await self.workers.start()
        self._task = self._tasks.spawn(self._loop(), name="livegen-world-scheduler")

    async def stop(self) -> None:
        await self._tasks.aclose()
        await self.workers.close()

    # -- sessions --------------------------------------------------------------------------
    async def reserve(
        self, session_id: str, frames_per_chunk: int | None = None, *, realtime: bool = True
    ) -> None:
        """Admit a new session to a cluster's shared world service before its runner starts
        (``workers.WorkerPool.reserve``; nothing in a server of its own, where ``add`` admits)."""
        if realtime:
            self.admission.check_realtime(self.spec.for_session(frames_per_chunk).frames_per_chunk)
        await self.workers.reserve(session_id)

    def add(self, runner: Steppable) -> None:
        """Admit a session (raises ``CapacityExceeded`` when the KV pool or the frame clock is full)."""
        if runner.is_realtime:
            self.admission.check_realtime(runner.spec.frames_per_chunk)
        self.workers.admit(runner.session_id)
        self._runners[runner.session_id] = runner
        self.align(runner)
        self.wake()

    def align(self, runner: Steppable) -> None:
        """Anchor a realtime runner's media clock in phase with the others of its chunk length
        (``admission.Admission.align``: on creation, reset, or a switch to realtime pacing)."""
        self.admission.align(runner)

    def remove(self, session_id: str) -> None:
        self._runners.pop(session_id, None)
        self.workers.remove(session_id)

    async def release_state(self, session_id: str) -> None:
        """Free a session's pages and model-side state on every worker that holds it."""
        await self.workers.release(session_id)

    def wake(self) -> None:
        self._wake.set()

    # -- the loop --------------------------------------------------------------------------
    async def _loop(self) -> None:
        while True:
            now = self.clock()
            waiting = [r for r in list(self._runners.values()) if not self._is_worker_busy(r)]
            if not any(runner.is_due(now) for runner in waiting):
                await self._sleep(now, waiting)
                continue
            window = self.batch_window_s
            due = self.admission.fit_asap([runner for runner in waiting if runner.is_due(now, window)], now)
            if not due:  # only asap sessions, and no gap for them before a realtime deadline
                await self._sleep(now, waiting)
                continue
            entries = [entry for runner in due if (entry := self._plan(runner, now, window)) is not None]
            for group in _by_worker(entries):
                self._launch(group)
            await asyncio.sleep(0)  # let the steps start before planning again

    def _is_worker_busy(self, runner: Steppable) -> bool:
        return self._busy[self.workers.worker_index(runner.session_id)] > 0

    def _launch(self, entries: list[_Entry]) -> None:
        index = entries[0].worker_index
        self._busy[index] += 1
        self._tasks.spawn(self._run_step(index, entries), name=f"livegen-world-step-{index}")

    async def _run_step(self, index: int, entries: list[_Entry]) -> None:
        try:
            await self._step(entries)
        except Exception as exc:  # a bug here must fail the batch, not the server
            log_event(logger, "scheduler.error", logging.ERROR, error=repr(exc))
            for entry in entries:
                with contextlib.suppress(LivegenError):  # entries settled before the bug
                    self._fail(entry, "chunk_failed", f"internal error: {exc}")
        finally:
            self._busy[index] -= 1
            self.wake()

    async def _sleep(self, now: float, runners: list[Steppable]) -> None:
        deadlines = [d for r in runners if (d := r.next_deadline()) is not None]
        timeout = max(0.0, min(deadlines) - now) if deadlines else None
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._wake.wait()

    def _plan(self, runner: Steppable, now: float, early_s: float) -> _Entry | None:
        try:
            plan = runner.begin_tick(now, early_s)
        except Exception as exc:  # a bug in one session: stop scheduling it, keep the others going
            log_event(
                logger, "scheduler.session_crashed", logging.ERROR, session=runner.session_id, error=repr(exc)
            )
            self._runners.pop(runner.session_id, None)
            runner.crashed(f"internal error, the session stopped: {exc}")
            return None
        if plan is None:
            return None
        meta, spec = plan.meta, runner.spec
        try:
            pages = spec.pages_in_chunk(meta.chunk_index)
            index, context, write = self.workers.plan(runner.session_id, meta.chunk_index, pages)
        except LivegenError as exc:
            runner.tick_failed(plan, "chunk_failed", f"no KV pages: {exc}")
            return None
        data = plan.control_data()
        tick = Tick(
            meta,
            plan.seed,
            plan.prompt,
            data,
            context,
            write,
            plan.prompt_blend(),
            plan.seed_image,
            num_frames=spec.frames_in_chunk(meta.chunk_index),
        )
        return _Entry(runner, plan, tick, index)

    async def _step(self, entries: list[_Entry]) -> None:
        started = self.clock()
        try:
            chunks = await self.workers.step(entries[0].worker_index, [entry.tick for entry in entries])
        except WorkerRestarted as exc:  # the worker's state is gone for every session it held
            for entry in entries:
                self._fail(entry, "state_evicted", str(exc))
            return
        except Exception as exc:
            if len(entries) > 1:  # find whose tick fails; the others go on (W6: as they would alone)
                half = len(entries) // 2
                await self._step(entries[:half])
                await self._step(entries[half:])
            elif isinstance(exc, StateEvicted):
                self._fail(entries[0], "state_evicted", str(exc))
            else:
                self._fail(entries[0], "chunk_failed", f"model step failed: {type(exc).__name__}: {exc}")
            return
        model_ms = (self.clock() - started) * 1000
        self.batch_window_s = model_ms / 1000
        self.admission.costs.record(entries[0].runner.spec.frames_per_chunk, len(entries), model_ms / 1000)
        self.num_steps += 1
        self.num_ticks += len(entries)
        by_request = {chunk.meta.request_id: chunk for chunk in chunks}
        for entry in entries:
            chunk = by_request.get(entry.plan.meta.request_id)
            if chunk is None:
                self._fail(entry, "model_contract_error", "the model returned no chunk for this tick")
                continue
            self.workers.commit(entry.runner.session_id)
            entry.runner.tick_done(entry.plan, chunk, model_ms)

    def _fail(self, entry: _Entry, code: str, message: str) -> None:
        self.workers.clear(entry.runner.session_id)
        entry.runner.tick_failed(entry.plan, code, message)


def _by_worker(entries: list[_Entry]) -> list[list[_Entry]]:
    """The batch split into one step per worker and sessions' chunk length (a step makes one; a
    model's first chunk of another length, as causal Wan's, still joins its later ones), each in due
    order."""
    groups: dict[tuple[int, int], list[_Entry]] = {}
    for entry in entries:
        groups.setdefault((entry.worker_index, entry.runner.spec.frames_per_chunk), []).append(entry)
    return list(groups.values())
