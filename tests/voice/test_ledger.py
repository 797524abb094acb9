"""The input ledger's reservations (``voice/ledger.py``), one table row per transition.

As h11's ``test_state.py`` does for its tables: every (reservation state,
operation) pair, the refused ones included, with what it does to its
neighbours and to the pending total. Promises V3 and V5 (docs/architecture.md):
commits are head-only (wire order), a rollback takes every later reservation
with it, a settled reservation is never settled again, and the pending total
is exact.

The ledger keeps its rules in one class, ``InputLedger``: each operation checks
the state first, so the table is here rather than in the module.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from livegen.errors import CapacityExceeded, LocalProtocolError
from livegen.voice.ledger import InputLedger, Reservation, ReservationState

P, K, R = ReservationState.PENDING, ReservationState.COMMITTED, ReservationState.ROLLED_BACK
SIZES = (10, 20, 30)  # reservations a, b, c, reserved in this order


def ledger_with(where: str) -> tuple[InputLedger, list[Reservation], Reservation]:
    """Three reservations a, b, c and the one a row acts on, in the row's state."""
    ledger = InputLedger(budget_bytes=100)
    a, b, c = (ledger.reserve(size) for size in SIZES)
    if where == "pending head":
        return ledger, [a, b, c], a
    if where == "pending behind":
        return ledger, [a, b, c], b
    if where == "committed":
        ledger.commit(a)
        return ledger, [a, b, c], a
    assert where == "rolled back"
    ledger.rollback(c)
    return ledger, [a, b, c], c


OPERATIONS: dict[str, Callable[[InputLedger, Reservation], object]] = {
    "commit": InputLedger.commit,
    "rollback": InputLedger.rollback,
    "resize to 15": lambda ledger, r: ledger.resize(r, 15),
}

#: (state of the reservation acted on, operation) -> (states of a, b, c after, pending bytes
#: after, reservations a rollback released) or the error (then nothing changes).
TABLE: list[tuple[str, str, tuple[tuple[ReservationState, ...], int, str] | type[Exception]]] = [
    ("pending head", "commit", ((K, P, P), 50, "")),
    ("pending head", "rollback", ((R, R, R), 0, "abc")),
    ("pending head", "resize to 15", ((P, P, P), 65, "")),
    ("pending behind", "commit", LocalProtocolError),  # head-only: wire order
    ("pending behind", "rollback", ((P, R, R), 10, "bc")),  # later ones go with it
    ("pending behind", "resize to 15", ((P, P, P), 55, "")),
    ("committed", "commit", ((K, P, P), 50, "")),  # settled: no-op
    ("committed", "rollback", ((K, P, P), 50, "")),
    ("committed", "resize to 15", ((K, P, P), 50, "")),
    ("rolled back", "commit", ((P, P, R), 30, "")),
    ("rolled back", "rollback", ((P, P, R), 30, "")),
    ("rolled back", "resize to 15", ((P, P, R), 30, "")),
]


def test_the_table_covers_every_pair() -> None:
    wheres = ("pending head", "pending behind", "committed", "rolled back")
    assert [(w, o) for w, o, _ in TABLE] == [(w, o) for w in wheres for o in OPERATIONS]


@pytest.mark.parametrize(("where", "operation", "expected"), TABLE)
def test_transition(
    where: str,
    operation: str,
    expected: tuple[tuple[ReservationState, ...], int, str] | type[Exception],
) -> None:
    ledger, reservations, target = ledger_with(where)
    before = ([r.state for r in reservations], ledger.pending_bytes, ledger.num_pending)
    if not isinstance(expected, tuple):
        with pytest.raises(expected, match="out of order"):
            OPERATIONS[operation](ledger, target)
        assert ([r.state for r in reservations], ledger.pending_bytes, ledger.num_pending) == before
        return
    states, pending, released = expected
    result = OPERATIONS[operation](ledger, target)
    assert tuple(r.state for r in reservations) == states
    assert ledger.pending_bytes == pending == sum(r.num_bytes for r in reservations if r.state is P)
    assert ledger.num_pending == states.count(P)
    if operation == "rollback":
        assert result == [reservations["abc".index(name)] for name in released]


#: reserve(size, forced) with 60 of 100 bytes pending -> pending after, or the error.
RESERVE = [
    (40, False, 100),
    (41, False, CapacityExceeded),
    (41, True, 101),  # a commit's resampler tail must not fail
    (0, False, 60),
]


@pytest.mark.parametrize(("size", "is_forced", "expected"), RESERVE)
def test_reserve(size: int, is_forced: bool, expected: int | type[Exception]) -> None:
    ledger, reservations, _ = ledger_with("pending head")
    if isinstance(expected, int):
        reservation = ledger.reserve(size, is_forced=is_forced)
        assert reservation.state is P and reservation.seq == len(reservations)
        assert ledger.pending_bytes == expected
    else:
        with pytest.raises(expected, match="input audio backpressure"):
            ledger.reserve(size, is_forced=is_forced)
        assert ledger.pending_bytes == 60 and ledger.num_pending == 3


@pytest.mark.parametrize("where", ["pending head", "pending behind", "committed", "rolled back"])
def test_clear_rolls_back_everything_pending(where: str) -> None:
    ledger, reservations, _ = ledger_with(where)
    was_pending = [r for r in reservations if r.state is P]
    assert ledger.clear() == was_pending
    assert ledger.pending_bytes == 0 and ledger.num_pending == 0
    assert all(r.state is not P for r in reservations)
    assert ledger.clear() == []
