"""The world state machine with a second player (issue 39, shared worlds).

``PlayersMachine`` is ``WorldMachine`` (``test_session_machine.py``: every rule
and invariant there runs here too, interleaved) in a world that declares two
players: player 1, the owner, steers ``mode``, ``keys``, ``mouse`` and
``camera``; player 2 steers ``mode_2``. Its rules seat and unseat player 2
(the seat a leaver frees takes the next one, with ids of its own), send its
events, and try what it may not: another player's track, the prompt, a seat
past the model's. The promises checked: each player's events are applied to its
own tracks only, each one once and in its player's id order, every chunk names
them with their player; a refusal changes nothing.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from livegen.errors import CapacityExceeded, InvalidRequest, InvalidState
from livegen.world import AcceptStatus, ControlInput, Event, Manager, Output, Plan, Rejection, Release, Status
from world.test_session_machine import CAMERA, KEYS, MAX_PENDING, MODE, MOUSE, SEED_IMAGE, SID, WorldMachine

MODE_2 = replace(MODE, name="mode_2")
PLAYERS = (("mode", "keys", "mouse", "camera"), ("mode_2",))
GUEST = 2


def seats(machine: PlayersMachine) -> tuple[Any, ...]:
    """What a refused player event must leave as it was: the seats and player 2's queue."""
    session = machine.session
    return (
        session.players,
        session.pending_ids_of(GUEST),
        session.event_floor_of(GUEST),
        tuple(sorted(session.controls.items())),
    )


class PlayersMachine(WorldMachine):
    def __init__(self) -> None:
        super().__init__()
        counter = itertools.count()
        self.manager = Manager(
            tracks=[MODE, KEYS, MOUSE, CAMERA, MODE_2],
            new_id=lambda: str(next(counter)),
            max_sessions=1,
            reducer_factory=lambda: self.reducer,
            players=PLAYERS,
        )
        self.session = self.manager.create(
            SID, max_pending_events=MAX_PENDING, prompt="start", seed_image=SEED_IMAGE
        )
        self.is_seated = False
        #: Each seating of player 2 is a tenure: a newcomer's ids are its own, not the leaver's.
        self.tenure = 0
        self.guest_next = 0
        self.guest_sent: list[int] = []
        self.guest_applied: list[int] = []
        self.guest_refused: set[int] = set()
        self.plan_tenure = 0

    def drain(self) -> None:
        """As ``WorldMachine.drain``; a refusal of player 2's events is its own, naming its ids."""
        for effect in self.session.take_effects():
            if isinstance(effect, Output):
                self.delivered.append(effect.meta.request_id)
            elif isinstance(effect, Release):
                self.released_reasons.append(effect.reason)
            elif isinstance(effect, Rejection):
                assert effect.error.code == "event_rejected"
                refused = self.guest_refused if effect.player == GUEST else self.refused
                refused.update(effect.event_ids)

    def refused_unchanged(self, event: Event, error: type[Exception], code: str) -> None:
        before = seats(self)
        self.unchanged_after(lambda: self.session.accept(event), error)
        with pytest.raises(error) as caught:
            self.session.accept(event)
        assert getattr(caught.value, "code", None) == code and seats(self) == before

    # -- seats -----------------------------------------------------------------------------
    @rule()
    def join(self) -> None:
        self.drain()
        if self.session.status in (Status.CLOSING, Status.CLEANUP_FAILED, Status.CLOSED):
            with pytest.raises(InvalidState):
                self.session.join()
            return
        if self.is_seated:  # a seat past the model's two players
            before = seats(self)
            with pytest.raises(CapacityExceeded) as caught:
                self.session.join()
            assert caught.value.code == "too_many_players" and seats(self) == before
            return
        assert self.session.join() == GUEST
        self.is_seated, self.tenure = True, self.tenure + 1
        self.guest_next, self.guest_sent, self.guest_applied, self.guest_refused = 0, [], [], set()

    @rule()
    def leave(self) -> None:
        self.session.leave(GUEST)
        self.is_seated = False
        assert self.session.players == (1,) and self.session.pending_ids_of(GUEST) == ()

    # -- player 2's events -----------------------------------------------------------------
    @rule(gap=st.integers(1, 2), is_poison=st.booleans())
    def guest_event(self, gap: int, is_poison: bool) -> None:
        self.drain()
        event_id = self.guest_next + gap
        value = "poison" if is_poison else f"g{event_id}"
        event = Event.of(
            event_id, None, [ControlInput.of("mode_2", "test.mode.v1", {"v": value})], player=GUEST
        )
        if self.session.status is not Status.ACTIVE:
            self.unchanged_after(lambda: self.session.accept(event), InvalidState)
        elif not self.is_seated:
            self.refused_unchanged(event, InvalidState, "player_not_seated")
        elif len(self.session.pending_ids_of(GUEST)) >= MAX_PENDING:
            self.refused_unchanged(event, CapacityExceeded, "queue_full")
        else:
            acceptance = self.session.accept(event)
            assert acceptance.status is AcceptStatus.ACCEPTED
            assert acceptance.pending_event_count == len(self.session.pending_ids_of(GUEST))
            self.guest_next = event_id
            self.guest_sent.append(event_id)

    @precondition(lambda self: self.is_seated and self.session.status is Status.ACTIVE)
    @rule(what=st.sampled_from(["owner_track", "prompt", "owner_steers_guest"]), data=st.data())
    def steer_what_is_not_yours(self, what: str, data: st.DataObject) -> None:
        """Another player's track, or the prompt from player 2: refused, nothing changes."""
        event_id = self.guest_next + 1
        mode = [ControlInput.of("mode", "test.mode.v1", {"v": "g"})]
        mode_2 = [ControlInput.of("mode_2", "test.mode.v1", {"v": "o"})]
        if what == "owner_track":
            self.refused_unchanged(
                Event.of(event_id, None, mode, player=GUEST), InvalidRequest, "track_not_yours"
            )
        elif what == "prompt":
            event = Event.of(event_id, "a prompt", mode_2, player=GUEST)
            self.refused_unchanged(event, InvalidRequest, "prompt_not_yours")
        else:
            event = Event.of(self.next_id + 1, None, mode_2)
            self.refused_unchanged(event, InvalidRequest, "track_not_yours")

    @precondition(lambda self: self.session.status is Status.ACTIVE)
    @rule(data=st.data())
    def guest_resends(self, data: st.DataObject) -> None:
        """Player 2 retransmits one of its ids: duplicate or stale, by its own floor; no change."""
        self.drain()
        sent = [event_id for event_id in self.guest_sent if event_id not in self.guest_refused]
        if not sent or not self.is_seated:
            return
        event_id = data.draw(st.sampled_from(sent))
        event = Event.of(
            event_id, None, [ControlInput.of("mode_2", "test.mode.v1", {"v": "r"})], player=GUEST
        )
        before = seats(self)
        try:
            assert self.session.accept(event).status is AcceptStatus.DUPLICATE
        except InvalidState as error:
            assert error.code == "stale_event" and event_id <= self.session.event_floor_of(GUEST)
        assert seats(self) == before

    # -- chunks ----------------------------------------------------------------------------
    @rule()
    def begin_tick(self) -> None:
        pending = self.session.pending_ids_of(GUEST)
        committed = self.session.controls["mode_2"].data["v"]
        was_ticking = self.plan is not None
        super().begin_tick()
        if self.plan is None or was_ticking:  # no new plan: the base rule checked the refusal
            return
        self.plan_tenure = self.tenure
        self.check_players(self.plan, pending, committed)

    def check_players(self, plan: Plan, pending: tuple[int, ...], committed: str) -> None:
        """A chunk names every event it applies with its player; each player's events set only its
        own tracks (player 2's values are ``g<id>``, the owner's never are)."""
        owner = [event_id for player, event_id in plan.applied if player == 1]
        guest = [event_id for player, event_id in plan.applied if player == GUEST]
        assert {player for player, _ in plan.applied} <= {1, GUEST}
        assert tuple(owner) == plan.meta.applied_event_ids
        assert guest == sorted(guest) and set(guest) | self.guest_refused >= set(pending)
        assert not self.guest_refused & set(guest)
        assert plan.controls["mode_2"].data["v"] == (f"g{guest[-1]}" if guest else committed)
        assert not plan.controls["mode"].data["v"].startswith("g")

    def _commit(self) -> Output:
        plan = self.plan
        assert plan is not None
        out = super()._commit()
        assert out.applied == plan.applied
        if (
            self.plan_tenure == self.tenure and self.is_seated
        ):  # a leaver's in-flight events are not the newcomer's
            self.guest_applied.extend(event_id for player, event_id in plan.applied if player == GUEST)
        return out

    @rule(is_released=st.booleans())
    def reset(self, is_released: bool) -> None:
        was_ticking = self.plan is not None
        super().reset(is_released)
        if is_released and not was_ticking and self.session.status is Status.ACTIVE:
            assert self.session.pending_ids_of(GUEST) == ()
            assert self.session.players == ((1, GUEST) if self.is_seated else (1,))  # a reset seats them on

    @precondition(lambda self: self.session.status is Status.CLOSED)
    @rule()
    def reopen(self) -> None:
        super().reopen()
        self.is_seated, self.tenure = False, self.tenure + 1
        self.guest_next, self.guest_sent, self.guest_applied, self.guest_refused = 0, [], [], set()

    # -- the promise -----------------------------------------------------------------------
    @invariant()
    def players_own_their_tracks_and_events(self) -> None:
        """Each player's events apply once, in its own id order, above its own floor; seats never
        pass the model's players."""
        assert self.session.players == ((1, GUEST) if self.is_seated else (1,))
        assert len(self.guest_applied) == len(set(self.guest_applied))
        assert self.guest_applied == sorted(self.guest_applied)
        pending = self.session.pending_ids_of(GUEST)
        assert len(pending) <= MAX_PENDING and not set(pending) & set(self.guest_applied)
        assert all(event_id > max(self.guest_applied, default=-1) for event_id in pending)


TestPlayersMachine = PlayersMachine.TestCase
TestPlayersMachine.settings = settings(stateful_step_count=50, deadline=None)
