"""World placement on its own: the least loaded slot, a rollout's first chunk moving, pinned sessions.

The pool's tests (``test_workers.py``) reach these rules through the scheduler;
here ``Placement`` is driven directly, with plain seats (a worker is only
alive or lost to it) and no KV pools.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from livegen.errors import CapacityExceeded, LocalProtocolError
from livegen.runtime.world.placement import Placement, Slot


@dataclass
class Seat:
    is_alive: bool = True


def placement(workers: int) -> Placement[Seat]:
    return Placement([Slot(Seat(), None) for _ in range(workers)], is_shared=False)


def test_new_sessions_spread_and_a_first_chunk_moves_only_to_a_less_loaded_worker() -> None:
    places = placement(2)
    for session in ("a", "b", "c"):
        places.admit(session)
    assert [places.index(s) for s in ("a", "b", "c")] == [0, 1, 0]
    assert places.for_chunk("a", 0) == 0  # a tie (1 and 1 without it) keeps it where it is
    places.remove("b")
    assert places.for_chunk("c", 1) == 0  # past the first chunk it holds state: it stays
    assert places.for_chunk("c", 0) == 1  # a new rollout goes where there is room
    assert [len(slot.sessions) for slot in places.slots] == [1, 1]


def test_a_pinned_session_stays_and_a_removed_one_is_gone() -> None:
    places = placement(2)
    places.admit("a")
    places.place("stand-in", 0)
    assert places.for_chunk("stand-in", 0) == 0  # worker 1 is empty, but it was placed to stay
    places.remove("stand-in")
    assert "stand-in" not in places and places.get("stand-in") is None
    with pytest.raises(LocalProtocolError):
        places.index("stand-in")


def test_no_live_worker_refuses_with_no_workers() -> None:
    places = placement(1)
    places.slots[0].worker.is_alive = False
    assert places.is_full
    with pytest.raises(CapacityExceeded) as refused:
        places.admit("a")
    assert refused.value.code == "no_workers"
