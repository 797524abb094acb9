"""The world socket's table (``world/lifecycle.py``): complete, and each state's rule.

The same over real sockets: ``tests/server/test_world.py`` (``session_not_created``,
``session_closed``, acks after a close).
"""

from __future__ import annotations

import itertools

import pytest

from livegen.errors import LocalProtocolError
from livegen.world import lifecycle
from livegen.world.lifecycle import DISPATCH, Action, Message, State, dispatch


def test_every_state_takes_every_message() -> None:
    assert set(DISPATCH) == set(itertools.product(State, Message))


def test_only_a_session_update_opens_and_nothing_else_reaches_a_missing_session() -> None:
    assert dispatch(State.NEW, Message.UPDATE) is Action.OPEN
    assert {dispatch(State.NEW, m) for m in Message if m is not Message.UPDATE} == {Action.NOT_CREATED}


def test_an_open_session_is_reconfigured_by_updates_and_driven_by_the_rest() -> None:
    assert dispatch(State.OPEN, Message.UPDATE) is Action.RECONFIGURE
    assert {dispatch(State.OPEN, m) for m in Message if m is not Message.UPDATE} == {Action.DRIVE}


def test_a_closed_session_ignores_acks_and_refuses_the_rest() -> None:
    assert dispatch(State.CLOSED, Message.ACK) is Action.IGNORE
    assert {dispatch(State.CLOSED, m) for m in Message if m is not Message.ACK} == {Action.CLOSED}


def test_a_pair_the_table_lacks_is_our_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(lifecycle.DISPATCH, (State.OPEN, Message.RESET))
    with pytest.raises(LocalProtocolError, match=r"open cannot take world\.reset"):
        dispatch(State.OPEN, Message.RESET)
