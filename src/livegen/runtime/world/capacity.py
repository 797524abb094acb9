"""What a batched world step costs, measured per chunk length and batch size, and what it allows.

The scheduler (``scheduler.py``) records every step it makes here, in its
admission (``admission.py``): its chunk length (frames), how many ticks it
batched and how long it took. A batch does
not cost its size times one tick: tiny-world on a CPU steps one session in
about a third of the time it steps four (issue 39: 86.6 fps alone, 32.2 fps
each of four), so admission that charged every session one session's step
refused the second browser tab. Admission asks instead what the batch that
would include the new session costs (``estimate``) and whether every
realtime session on that worker still gets its chunks within the headroom
(``load``).

Estimates are upper bounds, never guesses below what was seen: a batch size
measured is its median over the last ``STEPS_KEPT`` steps of that size (a
neighbour's burst does not halve the capacity, a neighbour that stays busy
lowers it); a size not measured costs what the smallest larger measured size
costs (a bigger batch never costs less), or else it is extrapolated from
the largest measured sizes: along the line through the two largest (a fixed
cost per step plus one per tick is met exactly; a batch whose saving grows
with its size lies below that line), never above the largest's cost scaled
by the sizes' ratio (batching only ever saves). A chunk length never measured borrows the nearest
longer length's cost as is (a shorter chunk never costs more), or a shorter
one's in proportion to the frames. Nothing measured: no estimate, and
admission admits (the first step measures it).

A size calibrated at start (``calibrate.py``) but not yet stepped live is
scaled by how the live steps compare with their own calibration: a start
on a busy machine (two servers loading at once) measured every size slow,
and a neighbour that came since makes every size slower alike; the live
steps say by how much. A live median always wins over a calibrated one.

Pure arithmetic over recorded numbers: no clock, no I/O.
"""

from __future__ import annotations

import collections
import math
import statistics
from collections.abc import Mapping

#: Steps of one (chunk length, batch size) whose median the estimate reads.
STEPS_KEPT = 32
#: The largest batch ``capacity`` considers on one worker.
MAX_BATCH = 1024


class StepCosts:
    """Measured step seconds, keyed by (frames per chunk, batch size): live steps, and the start's
    calibration (``calibrate.py``) for the sizes no live step has had yet."""

    def __init__(self, fps: float) -> None:
        self.fps = fps
        self._steps: dict[tuple[bool, int, int], collections.deque[float]] = {}
        #: Live steps, then calibration's: frames per chunk -> batch size -> median seconds.
        self._live: dict[int, dict[int, float]] = {}
        self._calibrated: dict[int, dict[int, float]] = {}

    def record(self, frames: int, batch: int, seconds: float, *, calibration: bool = False) -> None:
        kept = self._steps.setdefault((calibration, frames, batch), collections.deque(maxlen=STEPS_KEPT))
        kept.append(seconds)
        table = self._calibrated if calibration else self._live
        table.setdefault(frames, {})[batch] = statistics.median(kept)

    @property
    def is_measured(self) -> bool:
        return bool(self._live or self._calibrated)

    def _sizes(self, frames: int) -> dict[int, float]:
        """Batch size -> seconds for one chunk length: live medians, and calibrated sizes scaled by
        how the largest live size that was calibrated too compares with its calibration (a start
        on a busy machine, or a neighbour since, moves every calibrated size alike)."""
        live, calibrated = self._live.get(frames, {}), self._calibrated.get(frames, {})
        both = [n for n in live if n in calibrated]
        scale = live[max(both)] / calibrated[max(both)] if both else 1.0
        return {**{n: seconds * scale for n, seconds in calibrated.items()}, **live}

    def measured(self) -> dict[int, dict[int, float]]:
        """Frames per chunk -> batch size -> seconds, as admission reads them (for ``/health``)."""
        lengths = sorted({*self._live, *self._calibrated})
        return {frames: dict(sorted(self._sizes(frames).items())) for frames in lengths}

    def estimate(self, frames: int, batch: int) -> float | None:
        """Seconds a step of ``batch`` chunks of ``frames`` frames takes, at most (None: unmeasured)."""
        lengths = {*self._live, *self._calibrated}
        if frames in lengths:
            return _by_size(self._sizes(frames), batch)
        longer = [f for f in lengths if f > frames]
        if longer:
            return _by_size(self._sizes(min(longer)), batch)
        if lengths:
            shorter = max(lengths)
            return _by_size(self._sizes(shorter), batch) * frames / shorter
        return None

    def load(self, batches: Mapping[int, int]) -> float:
        """The share of one worker's time its realtime sessions need, ``batches`` of them by chunk
        length, each length stepped as one batch per chunk period (0 while unmeasured)."""
        total = 0.0
        for frames, batch in batches.items():
            if batch > 0 and (seconds := self.estimate(frames, batch)) is not None:
                total += seconds * self.fps / frames
        return total

    def capacity(self, frames: int, headroom: float) -> int | None:
        """The most realtime sessions of ``frames``-frame chunks one worker makes in real time
        within ``headroom`` (None: unmeasured)."""
        if self.estimate(frames, 1) is None:
            return None
        count = 0
        while count < MAX_BATCH and self.load({frames: count + 1}) <= headroom:
            count += 1
        return count


def _by_size(sizes: Mapping[int, float], batch: int) -> float:
    """A size measured: its median; past the largest, the line through the two largest measured
    sizes (exact for a fixed cost plus a cost per tick, above a cost whose batching saves more as
    the batch grows), never above their ticks in proportion; else the next larger size's."""
    if batch in sizes:
        return sizes[batch]
    larger = [n for n in sizes if n > batch]
    if larger:
        return sizes[min(larger)]
    below = sorted(n for n in sizes if n < batch)
    top, cost = below[-1], sizes[below[-1]]
    proportional = cost * batch / top
    if len(below) < 2:
        return proportional
    slope = max(0.0, (cost - sizes[below[-2]]) / (top - below[-2]))
    return min(proportional, cost + slope * (batch - top))


def ceil_phase(origin: float, period: float, now: float) -> float:
    """The first time at or after ``now`` that is a whole number of ``period`` after ``origin``:
    sessions anchored there have their chunks due together, so they batch."""
    if now <= origin:
        return origin
    return origin + math.ceil((now - origin) / period - 1e-9) * period
