"""The life of an append-chain attempt (``voice/chain.py``), one table row per transition.

As h11's ``test_state.py`` does for its connection states: every (state, event)
pair, the refused ones included, against ``TRANSITIONS``, through both ways the
core moves an attempt (``Attempt.apply`` and a direct write of ``state``).
Promise V3 (docs/architecture.md): an attempt is settled exactly once.
"""

from __future__ import annotations

import pytest

from livegen.errors import LocalProtocolError
from livegen.voice.chain import TRANSITIONS, Attempt, AttemptEvent, AttemptKind, AttemptState

Q, D, F, C = AttemptState.QUEUED, AttemptState.DONE, AttemptState.FAILED, AttemptState.CANCELLED
RAN, REFUSED, BROKEN, CANCELLED = (
    AttemptEvent.RAN,
    AttemptEvent.REFUSED,
    AttemptEvent.BROKEN,
    AttemptEvent.CANCELLED,
)
REFUSED_PAIR = LocalProtocolError

#: (state, event) -> the next state, or the error. Written out, not derived from the code.
TABLE: list[tuple[AttemptState, AttemptEvent, AttemptState | type[Exception]]] = [
    # a queued attempt is settled once, by the runtime's report or by a canceller
    (Q, RAN, D),
    (Q, REFUSED, F),
    (Q, BROKEN, F),
    (Q, CANCELLED, C),
    # the runtime's report of an attempt already settled is ignored
    (D, RAN, D),
    (D, REFUSED, D),
    (F, RAN, F),
    (F, REFUSED, F),
    (C, RAN, C),
    (C, REFUSED, C),
    # settling a settled attempt again is a bug in the core
    (D, BROKEN, REFUSED_PAIR),
    (D, CANCELLED, REFUSED_PAIR),
    (F, BROKEN, REFUSED_PAIR),
    (F, CANCELLED, REFUSED_PAIR),
    (C, BROKEN, REFUSED_PAIR),
    (C, CANCELLED, REFUSED_PAIR),
]


def attempt_in(state: AttemptState) -> Attempt:
    attempt = Attempt(seq=7, kind=AttemptKind.APPEND, epoch=0)
    if state is not Q:
        attempt.state = state
    return attempt


def test_the_table_covers_every_pair() -> None:
    assert {(s, e) for s, e, _ in TABLE} == {(s, e) for s in AttemptState for e in AttemptEvent}


def test_the_module_table_is_this_table() -> None:
    assert {(s, e): after for s, e, after in TABLE if isinstance(after, AttemptState)} == TRANSITIONS


@pytest.mark.parametrize(("state", "event", "after"), TABLE)
def test_apply(state: AttemptState, event: AttemptEvent, after: AttemptState | type[Exception]) -> None:
    attempt = attempt_in(state)
    if isinstance(after, AttemptState):
        assert attempt.apply(event) == (after is not state)
        assert attempt.state is after
        assert attempt.is_live == (after is Q)
    else:
        with pytest.raises(after, match=f"attempt 7 \\(append\\) is {state}: cannot be {event}"):
            attempt.apply(event)
        assert attempt.state is state


#: A direct move (``attempt.move(...)``, as the core settles attempts) goes only along
#: the table: from queued to a settled state, never out of a settled one.
WRITES = [
    (before, target, before is Q and target is not Q) for before in AttemptState for target in AttemptState
]


@pytest.mark.parametrize(("before", "target", "allowed"), WRITES)
def test_direct_write(before: AttemptState, target: AttemptState, allowed: bool) -> None:
    attempt = attempt_in(before)
    if allowed:
        attempt.move(target)
        assert attempt.state is target
    else:
        with pytest.raises(LocalProtocolError, match="cannot become"):
            attempt.move(target)
        assert attempt.state is before


def test_other_fields_write_freely() -> None:
    attempt = attempt_in(C)
    attempt.response_id = "resp_1"
    assert attempt.response_id == "resp_1"
