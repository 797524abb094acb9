"""Measuring a batch's cost before any session asks: the scheduler's start-up calibration.

Admission (``admission.py``) needs what a batch of n sessions costs before n
sessions exist: with only one session measured, the next is judged from one
session's step scaled up, and a model whose step is mostly a fixed cost (the
page's 1-frame chunks on tiny-world) refused the second browser tab (issue 39).
So ``calibrate`` steps short rollouts of stand-in sessions through the real
worker path (placement, KV pages, the model's step, release) at a few batch
sizes and each chunk length the model makes, and records the steps with
context (past each rollout's first chunk) in the admission's ``StepCosts``.
Live steps then replace these numbers as sessions run (the medians keep the
most recent ``capacity.STEPS_KEPT``).

It runs once, on every live worker at once (they share the cores), before
the server says it is ready, and
stops growing a chunk length's batch once a batch is already too slow for the
frame clock (larger ones could not be admitted anyway, and a slow model, causal
Wan on a CPU, would spend minutes there); a model that cannot step stand-ins
(out of memory at a batch its KV pool admits) ends the calibration, logged, and
live steps measure it instead. A cluster's shared world services are not
calibrated here: their admission is the services' and their steps are shared
with other processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from livegen.errors import CapacityExceeded, LivegenError
from livegen.logs import log_event
from livegen.models.world import Tick, TickMeta, WorldSpec
from livegen.world import freeze

if TYPE_CHECKING:
    from livegen.runtime.world.scheduler import Scheduler

logger = logging.getLogger("livegen.world")

#: Batch sizes measured at start (the sizes between borrow the next larger one's cost).
BATCHES = (1, 2, 3, 4, 6, 8)
#: Chunks of each stand-in rollout; the first (no context yet) is not recorded.
CHUNKS = 4
#: Stand-in session ids: never a real session's (those are 12 hex digits).
PREFIX = "livegen-calibration"


async def calibrate(scheduler: Scheduler, batches: tuple[int, ...] = BATCHES, chunks: int = CHUNKS) -> None:
    """Record step times of batches of ``batches`` sizes, for each chunk length the model makes."""
    spec = scheduler.spec
    if scheduler.workers.is_shared or not scheduler.workers.workers:
        return
    lengths = sorted({spec.frames_per_chunk, spec.for_session(1).frames_per_chunk})
    for frames in lengths:
        for batch in batches:
            try:
                await _rollouts(scheduler, spec.for_session(frames), batch, chunks)
            except CapacityExceeded:  # the KV pool holds fewer sessions: larger batches cannot run
                break
            except Exception as exc:  # a model that cannot step stand-ins: live steps measure it
                log_event(logger, "world.calibration_failed", logging.WARNING, error=repr(exc))
                return
            if scheduler.admission.costs.load({frames: batch}) > (
                scheduler.admission.realtime_headroom or 1.0
            ):
                break  # already past the frame clock: no larger batch of this length is admitted
    log_event(logger, "world.calibrated", step_ms=scheduler.admission.capacity()["step_ms"])


async def _rollouts(scheduler: Scheduler, spec: WorldSpec, batch: int, chunks: int) -> None:
    """``batch`` stand-ins on every live worker, stepped on all of them at once: workers share the
    machine's cores, and a worker's step while the others step too is what admission must read
    (measured alone, two Ray workers on 2 cores admitted 6 page sessions that then played 10 fps)."""
    workers = scheduler.workers
    indices = [i for i, worker in enumerate(workers.workers) if worker.is_alive]
    ids = {i: [f"{PREFIX}-{i}-{spec.frames_per_chunk}-{batch}-{n}" for n in range(batch)] for i in indices}
    try:
        for index, worker_ids in ids.items():
            for session_id in worker_ids:
                workers.place(session_id, index)
        for chunk in range(chunks):
            seconds = await asyncio.gather(
                *(_timed_step(scheduler, spec, index, worker_ids, chunk) for index, worker_ids in ids.items())
            )
            for elapsed in seconds if chunk > 0 else ():
                scheduler.admission.costs.record(spec.frames_per_chunk, batch, elapsed, calibration=True)
    finally:
        for session_id in (session_id for worker_ids in ids.values() for session_id in worker_ids):
            with contextlib.suppress(LivegenError):
                await workers.release(session_id)
            workers.remove(session_id)


async def _timed_step(scheduler: Scheduler, spec: WorldSpec, index: int, ids: list[str], chunk: int) -> float:
    ticks = [_tick(scheduler, spec, session_id, chunk) for session_id in ids]
    started = scheduler.clock()
    await scheduler.workers.step(index, ticks)
    elapsed = scheduler.clock() - started
    for session_id in ids:
        scheduler.workers.commit(session_id)
    return elapsed


def _tick(scheduler: Scheduler, spec: WorldSpec, session_id: str, index: int) -> Tick:
    pages = spec.pages_in_chunk(index)
    _, context, write = scheduler.workers.plan(session_id, index, pages)
    meta = TickMeta(session_id, f"{session_id}-{index}", index, ())
    controls = {track.name: freeze(track.default) for track in spec.controls}
    return Tick(meta, 0, "", controls, context, write, num_frames=spec.frames_in_chunk(index))
