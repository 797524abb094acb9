"""What the 10,000-frame session tests measure: a session's footprint early and late.

A long session must hold what a short one holds. ``Footprint`` samples, after every chunk of
the first thousand frames after the context window filled (frames 1,000-2,000) and of the last
thousand, the sizes a caller names (pages, the length of every per-session collection), and at
the end of each of those thousands the bytes of every live torch tensor and the number of
objects the garbage collector tracks: any container that is created per chunk or per event and
kept adds one or more. (``tracemalloc`` would also see kept strings and numbers, but it doubles
the cost of a step, and library caches that settle over hundreds of chunks blur it; those kept
values sit in some collection, and the collections' lengths are sampled.) Nothing here is a
timing.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import torch

FRAMES = 10_000
#: Objects the collector tracks that may differ between the two counts: caches settle early, and
#: the two moments differ by what is in flight (a kept exception's frames and traceback, say).
#: The runs make hundreds (causal-wan: 667) to thousands (tiny-world: 2,000) of chunks between
#: the counts, so one object kept a chunk or an event is far more.
OBJECT_SLACK = 256


def tensor_bytes() -> int:
    """Bytes of every live torch tensor (a storage shared by views counted once)."""
    storages: dict[int, int] = {}
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.Tensor) and obj.device.type != "meta":
            storage = obj.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


class Footprint:
    """Samples ``state()`` early and late in a long run (see module docstring)."""

    def __init__(self, state: Callable[[], Hashable]) -> None:
        self.state = state
        self.states: dict[str, set[Hashable]] = {"first": set(), "last": set()}
        self.totals: dict[str, Totals] = {}

    def sample(self, frames: int) -> None:
        """Call after each chunk with the frames made so far."""
        window = "first" if 1000 <= frames < 2000 else "last" if frames >= FRAMES - 1000 else None
        if window is not None:
            self.states[window].add(self.state())
        if frames >= 2000 and "first" not in self.totals:
            self.totals["first"] = totals()
        if frames >= FRAMES and "last" not in self.totals:
            self.totals["last"] = totals()

    def check(self) -> dict[str, Totals]:
        """Assert the run stayed flat; the totals, for a report."""
        first, last = self.states["first"], self.states["last"]
        assert first and first == last, f"per-session sizes changed: {first} -> {last}"
        check_totals(self.totals["first"], self.totals["last"])
        return self.totals


@dataclass(frozen=True)
class Totals:
    """Live tensor bytes and tracked objects at one moment (by type, to say what grew)."""

    tensor_bytes: int
    objects: Counter[str]


def totals() -> Totals:
    """The live tensor bytes and the objects the collector tracks, after a collection."""
    gc.collect()
    return Totals(tensor_bytes(), Counter(type(obj).__qualname__ for obj in gc.get_objects()))


def check_totals(first: Totals, last: Totals) -> None:
    """Neither the live tensor bytes nor the tracked objects grew from ``first`` to ``last``."""
    assert last.tensor_bytes <= first.tensor_bytes, (
        f"tensor bytes grew: {first.tensor_bytes} -> {last.tensor_bytes}"
    )
    grown = last.objects.total() - first.objects.total()
    most = (last.objects - first.objects).most_common(8)
    assert grown <= OBJECT_SLACK, f"tracked objects grew by {grown}, most: {most}"
