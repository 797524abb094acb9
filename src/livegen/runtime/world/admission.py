"""World admission: what a batch costs, and whether one more realtime session fits (issue 39).

It owns the measured step costs (``capacity.StepCosts``, medians of recent
steps by chunk length and batch size), the realtime headroom and the
media-clock phases; the scheduler (``scheduler.py``) owns the sessions and the
loop, the worker pool (``workers.py``) their placement, and both are read here
through the narrow ``Admitted`` and ``WorkerMap`` protocols.

A new realtime session is refused (``CapacityExceeded``, code
``realtime_capacity``) when, on every live worker, the batch that would
include it would need more than ``realtime_headroom`` of the worker's time to
make each of its realtime sessions' chunks in real time. A session is charged
for its own chunk length (a 1-frame chunk 16 times a second costs what a
1-frame step costs, its overhead included). ``pacing: asap`` sessions are
never charged: they join a realtime step only while the realtime load with
them stays within the headroom, and step on their own only in the gap before
the worker's next realtime deadline, so they use what is left. A realtime
session's media clock is anchored in phase with the others of its chunk
length, so their chunks fall due together and batch. Until a step has been
measured every session is admitted.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeVar

from livegen.errors import CapacityExceeded
from livegen.models.world import WorldSpec
from livegen.runtime.world.capacity import StepCosts, ceil_phase

#: The share of the workers' time realtime sessions may need: the rest absorbs uneven steps,
#: encoding and the sockets, so that every admitted session still gets its frames on time.
REALTIME_HEADROOM = 0.85

#: A runner the scheduler steps (``scheduler.Steppable``): what ``fit_asap`` keeps, it hands back.
R = TypeVar("R", bound="Admitted")


class Admitted(Protocol):
    """What admission needs of a session's runner."""

    session_id: str
    #: The model's spec as the session sees it (its chunk length, ``WorldSpec.for_session``).
    spec: WorldSpec

    @property
    def is_realtime(self) -> bool:
        """Paced to the media clock (charged by admission), not ``asap``."""
        ...

    def restart_clock(self, phase: Callable[[float], float]) -> None:
        """Anchor the media clock so the next chunk is due now, moved to ``phase(anchor)``."""
        ...

    def next_deadline(self) -> float | None: ...


class LiveWorker(Protocol):
    is_alive: bool


class WorkerMap(Protocol):
    """What admission needs of the worker pool: its workers, and which one holds a session."""

    @property
    def workers(self) -> Sequence[LiveWorker]: ...

    def worker_index(self, session_id: str) -> int: ...


class Admission:
    """Charges realtime sessions to their workers' time and refuses the one that would not fit."""

    def __init__(
        self,
        sessions: Mapping[str, Admitted],
        placement: WorkerMap,
        spec: WorldSpec,
        realtime_headroom: float = REALTIME_HEADROOM,
    ) -> None:
        """Admit among ``sessions`` (the scheduler's, read live) placed by ``placement``."""
        self._sessions = sessions
        self._placement = placement
        self.spec = spec
        #: Measured step seconds by chunk length and batch size (``capacity.py``).
        self.costs = StepCosts(spec.fps)
        #: The share of a worker's time its realtime sessions may need (0: no such limit).
        self.realtime_headroom = realtime_headroom
        #: Chunk length -> the media-clock origin its realtime sessions are anchored in phase with.
        self._phases: dict[int, float] = {}

    def align(self, runner: Admitted) -> None:
        """Anchor a realtime runner's media clock in phase with the others of its chunk length
        (on creation, reset, or a switch to realtime pacing): their chunks fall due together."""
        if not runner.is_realtime:
            return
        frames = runner.spec.frames_per_chunk
        period = frames / runner.spec.fps
        runner.restart_clock(lambda base: ceil_phase(self._phases.setdefault(frames, base), period, base))

    def _live_workers(self) -> list[int]:
        return [index for index, worker in enumerate(self._placement.workers) if worker.is_alive]

    def _on(self, index: int, runner: Admitted) -> bool:
        return self._placement.worker_index(runner.session_id) == index

    def realtime_batches(self, index: int) -> collections.Counter[int]:
        """Chunk length -> realtime sessions placed on worker ``index``."""
        return collections.Counter(
            runner.spec.frames_per_chunk
            for runner in self._sessions.values()
            if runner.is_realtime and self._on(index, runner)
        )

    def worker_load(self, index: int, extra: Mapping[int, int] | None = None) -> float:
        """The share of worker ``index``'s time its realtime sessions need, with ``extra`` more
        (chunk length -> count): each length's batch once per chunk period (0 unmeasured)."""
        batches = self.realtime_batches(index)
        batches.update(extra or {})
        return self.costs.load(batches)

    @property
    def realtime_load(self) -> float:
        """The busiest live worker's realtime load (0 unmeasured)."""
        return max((self.worker_load(index) for index in self._live_workers()), default=0.0)

    @property
    def num_realtime(self) -> int:
        return sum(runner.is_realtime for runner in self._sessions.values())

    def _fit_load(self, frames: int) -> float | None:
        """The least load a live worker would have with one more realtime session of ``frames``
        frames a chunk; None when it fits anyway (no limit, nothing measured, no realtime yet)."""
        if self.realtime_headroom <= 0 or not self.costs.is_measured or not self.num_realtime:
            return None
        return min((self.worker_load(index, {frames: 1}) for index in self._live_workers()), default=None)

    def check_realtime(self, frames: int) -> None:
        """Refuse (``realtime_capacity``) one more realtime session of ``frames``-frame chunks that
        would make some realtime session's batch miss the frame clock on every worker."""
        load = self._fit_load(frames)
        if load is not None and load > self.realtime_headroom:
            raise CapacityExceeded(
                f"the world model cannot make one more session's frames in real time (with it, "
                f"{self.num_realtime + 1} realtime sessions would need {load:.0%} of a worker's time, "
                f"over the {self.realtime_headroom:.0%} headroom); retry later",
                code="realtime_capacity",
            )

    @property
    def is_realtime_full(self) -> bool:
        """True when one more realtime session of the model's chunk length would not fit."""
        load = self._fit_load(self.spec.frames_per_chunk)
        return load is not None and load > self.realtime_headroom

    def capacity(self) -> dict[str, object]:
        """What ``/health`` and ``/metrics`` show: step time per batch size, and the realtime
        sessions of each measured chunk length (all of that length) it allows on the live workers."""
        headroom, live = self.realtime_headroom or 1.0, len(self._live_workers())
        measured = self.costs.measured()
        allowed = {str(f): (self.costs.capacity(f, headroom) or 0) * live for f in measured}
        return {
            "step_ms": {
                str(length): {str(n): round(s * 1000, 2) for n, s in sizes.items()}
                for length, sizes in measured.items()
            },
            "sessions": self.num_realtime,
            "capacity": allowed,
            "load": round(self.realtime_load, 3),
            "headroom": self.realtime_headroom,
        }

    def fit_asap(self, due: list[R], now: float) -> list[R]:
        """The due sessions to step now: every realtime one, and the ``asap`` ones that leave the
        realtime ones their frame clock (``_asap_share``)."""
        asap: dict[int, list[R]] = {}
        for runner in due:
            if not runner.is_realtime:
                asap.setdefault(self._placement.worker_index(runner.session_id), []).append(runner)
        if not asap:
            return due
        kept = {id(runner) for runner in due if runner.is_realtime}
        for index, runners in asap.items():
            realtime = [r for r in due if r.is_realtime and self._on(index, r)]
            kept.update(id(runner) for runner in self._asap_share(index, runners, realtime, now))
        return [runner for runner in due if id(runner) in kept]

    def _asap_share(self, index: int, asap: list[R], realtime: list[R], now: float) -> list[R]:
        """With realtime sessions due: the asap ones of their chunk lengths while the realtime load
        with them stays within the headroom. Without: the asap ones (of one chunk length) whose
        step ends before the worker's next realtime deadline."""
        limit = self.realtime_headroom or 1.0
        taken: list[R] = []
        if realtime:
            lengths = {runner.spec.frames_per_chunk for runner in realtime}
            extra: collections.Counter[int] = collections.Counter()
            for runner in asap:
                frames = runner.spec.frames_per_chunk
                if (
                    frames in lengths
                    and self.worker_load(index, extra + collections.Counter({frames: 1})) <= limit
                ):
                    extra[frames] += 1
                    taken.append(runner)
            return taken
        deadlines = [
            d
            for runner in self._sessions.values()
            if runner.is_realtime and self._on(index, runner) and (d := runner.next_deadline()) is not None
        ]
        frames = asap[0].spec.frames_per_chunk
        for runner in (r for r in asap if r.spec.frames_per_chunk == frames):
            cost = self.costs.estimate(frames, len(taken) + 1)
            if deadlines and cost is not None and now + cost > min(deadlines):
                break
            taken.append(runner)
        return taken
