"""One world session's transactional state: events in, chunk transactions out.

The core of the world promises (W1-W5, docs/architecture.md). It owns the four identities
(``session_id``; client ``event_id``s, monotonic across reset; ``chunk_index``,
contiguous and back to 0 on reset; one ``request_id`` per chunk execution),
the bounded queue of accepted events with its window of recent ids and its
floors (one per player of a shared world, ``players.py``, each seat steering
its own tracks), the committed prompt and controls, the prompt transition in progress
(``Transition``: which chunks blend the new prompt in, and how far), and the
seed image chunk 0 starts from.

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

from collections.abc import Callable, Iterable, Mapping, Sequence
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
from livegen.world import schema
from livegen.world.events import ControlInput, Event, freeze
from livegen.world.plans import Applied, Effect, Failure, Output, Plan, Rejection, Release, Transition
from livegen.world.players import OWNER, EventQueue, Seats
from livegen.world.reducer import LastWriteWins, Prepared, Reducer

__all__ = ["Effect", "Failure", "Output", "Plan", "Rejection", "Release", "Transition"]


class Status(StrEnum):
    ACTIVE = "active"
    RESETTING = "resetting"
    FAILED = "failed"
    CLOSING = "closing"
    CLEANUP_FAILED = "cleanup_failed"
    CLOSED = "closed"


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
        self._tracks = {track.name: track for track in tracks}
        self._checks = {track.name: schema.compile_schema(track.json_schema) for track in tracks}
        self._paths = {track.name: f"controls.{track.name}.data" for track in tracks}
        self._new_id = new_id
        self._reducer: Reducer = reducer or LastWriteWins()
        self._status = Status.ACTIVE
        #: Who plays (``players.py``): seats, each seat's tracks, and each player's own event queue.
        self.seats = Seats(players)
        self._is_shared = bool(players)
        self._queues = {OWNER: EventQueue(max_pending_events)}
        #: The queues the tick in flight drew from: a player who leaves and one who takes its seat
        #: meanwhile have different queues, so the newcomer's ids are never the leaver's.
        self._drawn_from: dict[int, EventQueue] = {}
        self._in_flight: Plan | None = None
        self._chunk_index = 0
        self._prompt = prompt
        self._transition: Transition | None = None
        self._controls = self._default_controls()
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
        return len(self._queues[OWNER].pending)

    @property
    def pending_ids(self) -> tuple[int, ...]:
        return self.pending_ids_of(OWNER)

    def pending_ids_of(self, player: int) -> tuple[int, ...]:
        queue = self._queues.get(player)
        return tuple(sorted(queue.pending)) if queue is not None else ()

    @property
    def event_floor(self) -> int:
        """The owner's ids at or below this are stale: the committed floor, raised by an in-flight tick."""
        return self.event_floor_of(OWNER)

    def event_floor_of(self, player: int) -> int:
        queue = self._queues.get(player)
        return max((queue.floor if queue is not None else -1, *self._in_flight_ids(player)))

    def _in_flight_ids(self, player: int) -> Iterable[int]:
        plan = self._in_flight
        if plan is None or self._drawn_from.get(player) is not self._queues.get(player):
            return ()
        return (event_id for who, event_id in plan.applied if who == player)

    @property
    def committed_floor(self) -> int:
        return self._queues[OWNER].floor

    @property
    def players(self) -> tuple[int, ...]:
        """The seated players, the owner (1) first."""
        return tuple(sorted(self.seats.taken))

    @property
    def in_flight(self) -> Plan | None:
        return self._in_flight

    @property
    def prompt(self) -> str:
        return self._prompt

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
            self._refuse(event.event_id)
        if event.controls:
            self._check_controls(event)
        queue = self._queues.get(event.player)
        if queue is None or self._is_shared:  # a one-player world's owner steers every track
            self.seats.check(event)
            queue = self._queues[event.player]
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
        player = self.seats.join()
        self._queues[player] = EventQueue(self.max_pending_events)
        return player

    def leave(self, player: int) -> None:
        """A player left: its seat is free and its pending events never apply (the owner never
        leaves: its session closes)."""
        if player != OWNER and player in self.seats.taken:
            self.seats.leave(player)
            del self._queues[player]

    def _refuse(self, event_id: int) -> NoReturn:
        """Events are taken only while active: closed, failed and resetting sessions refuse them."""
        if self._status in _CLOSED_STATES:
            raise InvalidState("the session is closed", code="session_closed", event_id=event_id)
        hint = "send world.reset to go on" if self._status is Status.FAILED else "wait for world.reset.done"
        raise InvalidState(
            f"the session is {self._status.value}; {hint}",
            code=f"session_{self._status.value}",
            event_id=event_id,
        )

    def _check_controls(self, event: Event) -> None:
        for control in event.controls:
            track = self._tracks.get(control.track)
            found: str | None
            if track is None:
                known = ", ".join(sorted(self._tracks)) or "none"
                found = f"unknown control track {control.track!r}; this model's tracks: {known}"
            elif control.schema != track.schema:
                found = f"track {track.name!r} takes schema {track.schema!r}, got {control.schema!r}"
            else:
                found = self._checks[track.name](control.data, self._paths[track.name])
                extra = schema.SEMANTIC_CHECKS.get(track.schema)
                if found is None and extra is not None:
                    found = extra(control.data, self._paths[track.name])
            if found:
                raise InvalidRequest(found, code="invalid_event", param="controls", event_id=event.event_id)

    # -- chunk transactions ----------------------------------------------------------------
    def begin_tick(self) -> Plan:
        """Snapshot the pending events into the next chunk's plan."""
        if self._status is not Status.ACTIVE or self._in_flight is not None:
            raise LocalProtocolError(f"cannot begin a tick: {self._status.value}, {self._in_flight}")
        queues = self._queues
        events = (
            queues[OWNER].ordered()
            if len(queues) == 1
            else [event for player in sorted(queues) for event in queues[player].ordered()]
        )
        prepared, refused = self._prepare(events)
        applied = [event for event in events if _key(event) not in refused] if refused else events
        prompt, transition = self._prompt_after(applied)
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
            tuple(_key(event) for event in applied),
        )
        # Every fallible step is behind us: mutate.
        if refused:
            self._drop_refused(refused)
        self._in_flight, self._drawn_from = plan, dict(self._queues)
        return plan

    def _prompt_after(self, applied: Sequence[Event]) -> tuple[str, Transition | None]:
        """The chunk's prompt, and the transition it is a step of: a new one, or the one going on.

        A new transition starts from the prompt in force before the chunk (where a transition was
        still going on, its target: the blend restarts from there).
        """
        prompt, transition = self._prompt, self._transition
        for event in applied:
            if event.prompt is None:
                continue
            transition = None
            if event.transition_chunks > 1:
                transition = Transition(
                    event.event_id, self._prompt, self._chunk_index, event.transition_chunks
                )
            prompt = event.prompt
        if transition is not None and transition.step(self._chunk_index) > transition.chunks:
            transition = None
        return prompt, transition

    def _prepare(self, events: Sequence[Event]) -> tuple[Prepared, tuple[Applied, ...]]:
        """Reduce events; on a reducer error, find the events to blame and leave them out.

        Upstream gap 1: a reducer that raised in ``prepare`` left its event in
        the queue, failing every later tick. ``prepare`` is speculative, so
        trying each event alone is safe; the ones that fail alone are refused
        (or all of them, when only their combination fails).
        """
        try:
            return self._reducer.prepare(self.controls, events, self._chunk_index), ()
        except Exception:
            pass
        refused = tuple(_key(event) for event in events if not self._prepares_alone(event))
        kept = [event for event in events if _key(event) not in refused] if refused else []
        refused = refused or tuple(_key(event) for event in events)
        try:
            return self._reducer.prepare(self.controls, kept, self._chunk_index), refused
        except Exception:
            return Prepared(self.controls), tuple(_key(event) for event in events)

    def _prepares_alone(self, event: Event) -> bool:
        try:
            self._reducer.prepare(self.controls, [event], self._chunk_index)
        except Exception:
            return False
        return True

    def _drop_refused(self, refused: tuple[Applied, ...]) -> None:
        """Drop the refused events; each player's client hears of its own."""
        for player in sorted({player for player, _ in refused}):
            ids = tuple(event_id for who, event_id in refused if who == player)
            for event_id in ids:
                self._queues[player].drop(event_id)
            names = ", ".join(str(event_id) for event_id in ids)
            error = InvalidRequest(
                f"the control reducer refused event(s) {names}; they were dropped and the session goes on",
                code="event_rejected",
                event_id=ids[0],
            )
            self._effects.append(Rejection(error, ids, player))

    def commit_tick(self, plan: Plan, echoed: TickMeta, output: object) -> Output:
        """Commit a chunk whose model step succeeded and echoed ``plan.meta`` exactly."""
        self._require_in_flight(plan)
        if echoed != plan.meta:
            self.fail_tick(plan, ModelContractError.code, f"the model echoed {echoed}, expected {plan.meta}")
            raise ModelContractError(f"model echoed {echoed}, expected {plan.meta}")
        try:
            self._reducer.commit(plan.prepared)  # the only fallible step, so first
        except Exception as exc:
            self.fail_tick(plan, "chunk_failed", f"control reducer commit failed: {exc}")
            raise ModelError(f"control reducer commit failed: {exc}") from exc
        if len(self._drawn_from) == 1:  # the owner alone
            self._queues[OWNER].applied(plan.meta.applied_event_ids)
        else:
            for player, queue in self._drawn_from.items():
                if queue is self._queues.get(player):  # not a player that left
                    queue.applied([event_id for who, event_id in plan.applied if who == player])
        self._prompt = plan.prompt
        self._transition = plan.transition
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
            self._reducer.reset()
        except Exception as exc:
            self._status = Status.FAILED
            self._effects.append(Failure("reset_failed", f"control reducer reset failed: {exc}"))
            return
        for queue in self._queues.values():
            queue.clear()
        self._prompt = self.initial_prompt
        self._transition = None
        self._controls = self._default_controls()
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
        for queue in self._queues.values():
            queue.pending.clear()
        self._status = Status.CLOSED

    def _default_controls(self) -> dict[str, ControlInput]:
        tracks = self._tracks.items()
        return {name: ControlInput(name, track.schema, freeze(track.default)) for name, track in tracks}


def _key(event: Event) -> Applied:
    """An event's identity in a shared world: its player and its player's id for it."""
    return (event.player, event.event_id)
