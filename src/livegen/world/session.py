"""One world session's transactional state: events in, chunk transactions out.

The core of the world promises (W1-W5, docs/architecture.md). It owns the four identities
(``session_id``; client ``event_id``s, monotonic across reset; ``chunk_index``,
contiguous and back to 0 on reset; one ``request_id`` per chunk execution),
the bounded queue of accepted events with its window of recent ids and its
floors (one per player of a shared world, ``players.py``'s ``Roster``, each seat
steering its own tracks), the committed controls, and the seed image chunk 0
starts from. Its parts own their own state: the tracks and their checks
(``tracks.py``), the committed prompt and its transition (``plans.py``'s
``Prompts``), the reducer and whom to blame when it raises (``reducer.py``'s
``Blaming``); the session owns the transaction that binds them.

A chunk is a plan: ``begin_tick`` snapshots the pending events into an
immutable ``Plan`` (every fallible step, reducer ``prepare`` included, runs
before any mutation); the runtime runs the model; then ``commit_tick`` (only
with the exact metadata echo) or ``fail_tick``. Nothing advances on failure.
Reset and close are two-step too (``begin_*`` asks the runtime to release the
model-side state, ``finish_*`` records whether that worked), because only the
runtime can talk to the worker that holds it.

Sans-IO: no clock, no ids of its own (``new_id`` is injected), no I/O. What
the runtime must do comes out as effects (``take_effects``): a committed
chunk's output, events a reducer refused, state to release, a failure to
report. Effects stay queued until taken, so a caller cancelled right after
``commit_tick`` cannot lose the chunk it committed (upstream gap 2), and the
effects of a call that then raises (a wrong echo fails the tick, then raises)
are not lost either. The voice core (``voice/session.py``) follows the same
convention: one way for both cores to hand the runtime what to do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from typing import NoReturn

import msgspec

from livegen.errors import (
    InvalidRequest,
    InvalidState,
    LocalProtocolError,
    ModelContractError,
    ModelError,
)
from livegen.models.world import ControlTrack, Frames, TickMeta
from livegen.world.events import ControlInput, Event, key
from livegen.world.plans import Effect, Failure, Output, Plan, Prompts, Rejection, Release, Transition
from livegen.world.players import OWNER, Roster
from livegen.world.reducer import Blaming, LastWriteWins, Reducer
from livegen.world.tracks import Tracks

__all__ = ["Effect", "Failure", "Output", "Plan", "Rejection", "Release", "Transition"]


class Status(StrEnum):
    ACTIVE = "active"
    RESETTING = "resetting"
    FAILED = "failed"
    CLOSING = "closing"
    CLEANUP_FAILED = "cleanup_failed"
    CLOSED = "closed"

    def refuse(self, event_id: int) -> NoReturn:
        """Events are taken only while active: closed, failed and resetting sessions refuse them."""
        if self in _CLOSED_STATES:
            raise InvalidState("the session is closed", code="session_closed", event_id=event_id)
        hint = "send world.reset to go on" if self is Status.FAILED else "wait for world.reset.done"
        message = f"the session is {self.value}; {hint}"
        raise InvalidState(message, code=f"session_{self.value}", event_id=event_id)


class AcceptStatus(StrEnum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"


class Acceptance(msgspec.Struct, frozen=True):
    """An event is queued (or already was); queued is not applied."""

    event_id: int
    status: AcceptStatus
    pending_event_count: int


_CLOSED_STATES = (Status.CLOSING, Status.CLEANUP_FAILED, Status.CLOSED)


class Session:
    """The transactional event queue and chunk snapshots of one world."""

    def __init__(
        self,
        session_id: str,
        *,
        tracks: Sequence[ControlTrack],
        new_id: Callable[[], str],
        max_pending_events: int = 64,
        prompt: str = "",
        seed: int = 0,
        reducer: Reducer | None = None,
        seed_image: Frames | None = None,
        players: Sequence[Sequence[str]] = (),
    ) -> None:
        if max_pending_events < 1:
            raise InvalidRequest("max_pending_events must be >= 1", param="max_pending_events")
        self.session_id = session_id
        self.seed = seed
        self.max_pending_events = max_pending_events
        self.initial_prompt = prompt
        #: The first frame chunk 0 starts from (after every reset too), where the model takes one.
        self.seed_image = seed_image
        self._tracks = Tracks(tracks)
        self._new_id = new_id
        self._reducer = Blaming(reducer or LastWriteWins())
        self._status = Status.ACTIVE
        #: Who plays (``players.py``): seats, each seat's tracks, and each player's own event queue.
        self.roster = Roster(players, max_pending_events)
        self.seats = self.roster.seats
        self._in_flight: Plan | None = None
        self._chunk_index = 0
        self._prompts = Prompts(prompt)
        self._controls = self._tracks.defaults()
        self._effects: list[Effect] = []

    # -- read-only views -------------------------------------------------------------------
    @property
    def status(self) -> Status:
        return self._status

    @property
    def chunk_index(self) -> int:
        return self._chunk_index

    @property
    def pending_event_count(self) -> int:
        """The owner's pending events (``pending_ids_of`` gives any player's)."""
        return len(self.roster.queues[OWNER].pending)

    @property
    def pending_ids(self) -> tuple[int, ...]:
        return self.pending_ids_of(OWNER)

    def pending_ids_of(self, player: int) -> tuple[int, ...]:
        queue = self.roster.queues.get(player)
        return tuple(sorted(queue.pending)) if queue is not None else ()

    @property
    def event_floor(self) -> int:
        """The owner's ids at or below this are stale: the committed floor, raised by an in-flight tick."""
        return self.event_floor_of(OWNER)

    def event_floor_of(self, player: int) -> int:
        return self.roster.floor(player, self._in_flight)

    @property
    def committed_floor(self) -> int:
        return self.roster.queues[OWNER].floor

    @property
    def players(self) -> tuple[int, ...]:
        """The seated players, the owner (1) first."""
        return tuple(sorted(self.seats.taken))

    @property
    def in_flight(self) -> Plan | None:
        return self._in_flight

    @property
    def prompt(self) -> str:
        return self._prompts.prompt

    @property
    def controls(self) -> Mapping[str, ControlInput]:
        return dict(self._controls)

    def take_effects(self) -> list[Effect]:
        effects, self._effects = self._effects, []
        return effects

    # -- events ----------------------------------------------------------------------------
    def accept(self, event: Event) -> Acceptance:
        """Queue an event in its player's queue, or report it a duplicate; raise if stale, full,
        refused, or not its player's to send."""
        if self._status is not Status.ACTIVE:
            self._status.refuse(event.event_id)
        if event.controls:
            self._tracks.check(event)
        queue = self.roster.queue_for(event)
        event_id, pending = event.event_id, queue.pending
        if event_id in pending or event_id in queue.recent:
            return Acceptance(event_id, AcceptStatus.DUPLICATE, len(pending))
        floor = queue.floor if self._in_flight is None else self.event_floor_of(event.player)
        if event_id <= floor or len(pending) >= queue.max_pending_events:
            queue.refuse(event, floor)
        queue.add(event)
        return Acceptance(event_id, AcceptStatus.ACCEPTED, len(pending))

    def join(self) -> int:
        """Seat a new player (``too_many_players`` past the model's seats); its event ids are its own."""
        if self._status in _CLOSED_STATES:
            raise InvalidState("the session is closed", code="session_closed")
        return self.roster.join()

    def leave(self, player: int) -> None:
        """A player left: its seat is free and its pending events never apply (the owner never
        leaves: its session closes)."""
        self.roster.leave(player)

    # -- chunk transactions ----------------------------------------------------------------
    def begin_tick(self) -> Plan:
        """Snapshot the pending events into the next chunk's plan."""
        if self._status is not Status.ACTIVE or self._in_flight is not None:
            raise LocalProtocolError(f"cannot begin a tick: {self._status.value}, {self._in_flight}")
        events = self.roster.pending()
        prepared, refused = self._reducer.prepare(self.controls, events, self._chunk_index)
        applied = [event for event in events if key(event) not in refused] if refused else events
        prompt, transition = self._prompts.after(applied, self._chunk_index)
        meta = TickMeta(
            session_id=self.session_id,
            request_id=f"ar-{self.session_id}-{self._chunk_index}-{self._new_id()}",
            chunk_index=self._chunk_index,
            applied_event_ids=tuple(event.event_id for event in applied if event.player == OWNER),
        )
        seed_image = self.seed_image if self._chunk_index == 0 else None
        plan = Plan(
            meta,
            self.seed,
            prompt,
            dict(prepared.controls),
            prepared,
            transition,
            seed_image,
            tuple(key(event) for event in applied),
        )
        # Every fallible step is behind us: mutate.
        if refused:
            self._effects.extend(self.roster.drop(refused))
        self._in_flight = plan
        self.roster.draw()
        return plan

    def commit_tick(self, plan: Plan, echoed: TickMeta, output: object) -> Output:
        """Commit a chunk whose model step succeeded and echoed ``plan.meta`` exactly."""
        self._require_in_flight(plan)
        if echoed != plan.meta:
            self.fail_tick(plan, ModelContractError.code, f"the model echoed {echoed}, expected {plan.meta}")
            raise ModelContractError(f"model echoed {echoed}, expected {plan.meta}")
        try:
            self._reducer.reducer.commit(plan.prepared)  # the only fallible step, so first
        except Exception as exc:
            self.fail_tick(plan, "chunk_failed", f"control reducer commit failed: {exc}")
            raise ModelError(f"control reducer commit failed: {exc}") from exc
        self.roster.applied(plan)
        self._prompts.commit(plan)
        self._controls = dict(plan.controls)
        self._chunk_index += 1
        self._in_flight = None
        committed = Output(plan.meta, output, plan.transition, plan.applied)
        self._effects.append(committed)
        return committed

    def fail_tick(self, plan: Plan, code: str, message: str) -> None:
        """The chunk failed: nothing advances, the session is ``failed``, state is released."""
        self._require_in_flight(plan)
        self._in_flight = None
        self._status = Status.FAILED
        self._effects.extend([Release("failed"), Failure(code, message)])

    def _require_in_flight(self, plan: Plan) -> None:
        if self._in_flight is not plan:
            raise LocalProtocolError(f"chunk {plan.meta.request_id} is not the tick in flight")

    # -- reset and close -------------------------------------------------------------------
    def begin_reset(self) -> None:
        if self._in_flight is not None:
            raise LocalProtocolError("settle the tick in flight before a reset")
        if self._status not in (Status.ACTIVE, Status.FAILED):
            code = "session_closed" if self._status in _CLOSED_STATES else "invalid_state"
            raise InvalidState(f"cannot reset a session that is {self._status.value}", code=code)
        self._status = Status.RESETTING
        self._effects.append(Release("reset"))

    def finish_reset(self, is_released: bool) -> None:
        """Record the worker's answer; on success the world starts over at chunk 0."""
        if self._status is not Status.RESETTING:
            raise LocalProtocolError(f"no reset in progress (status {self._status})")
        if not is_released:
            self._status = Status.FAILED
            return
        try:
            self._reducer.reducer.reset()
        except Exception as exc:
            self._status = Status.FAILED
            self._effects.append(Failure("reset_failed", f"control reducer reset failed: {exc}"))
            return
        for queue in self.roster.queues.values():
            queue.clear()
        self._prompts.reset()
        self._controls = self._tracks.defaults()
        self._chunk_index = 0
        self._status = Status.ACTIVE

    def begin_close(self) -> bool:
        """Start closing; False when already closed (a no-op)."""
        if self._status is Status.CLOSED:
            return False
        if self._in_flight is not None or self._status in (Status.CLOSING, Status.RESETTING):
            raise LocalProtocolError(f"settle the {self._status.value} session before closing it")
        self._status = Status.CLOSING
        self._effects.append(Release("close"))
        return True

    def finish_close(self, is_released: bool) -> None:
        """Closed, or a tombstone (``cleanup_failed``) until a close retry works."""
        if self._status is not Status.CLOSING:
            raise LocalProtocolError(f"no close in progress (status {self._status})")
        if not is_released:
            self._status = Status.CLEANUP_FAILED
            return
        for queue in self.roster.queues.values():
            queue.pending.clear()
        self._status = Status.CLOSED
