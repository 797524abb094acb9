"""Players of a shared world: their seats, the tracks each steers, and each one's event queue.

A model declares how many players it takes and which control tracks are each
player's (``WorldSpec.players``); a model that declares none is a one-player
world whose player steers every track. Player 1 is the session's owner; the
players it invites (``session.player_token``) take the lowest free seat from 2
up, and a player that leaves frees its seat for the next one.

Each player chooses its own event ids (they are its client's), so each has its
own ``EventQueue``: its pending events, its window of recent ids (duplicates)
and its floor (stale ids). A chunk applies every player's pending events; a
player's events set only its own tracks (``Seats.check``), so the order of
two players' events within a chunk changes nothing, and only the owner sets
the prompt. ``Roster`` holds the seats and every seated player's queue, and
which queues the chunk in flight drew from. Sans-IO, as the rest of
``world/``: no clock, no ids, no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import NoReturn

from livegen.errors import CapacityExceeded, InvalidRequest, InvalidState
from livegen.world.events import Applied, Event
from livegen.world.plans import Plan, Rejection

#: The session's owner: the player whose ``session.update`` made it.
OWNER = 1


class EventQueue:
    """One player's accepted events: pending, recently accepted ids, and the applied floor."""

    def __init__(self, max_pending_events: int) -> None:
        self.max_pending_events = max_pending_events
        self.pending: dict[int, Event] = {}
        self.recent: OrderedDict[int, None] = OrderedDict()
        self.floor = -1

    def refuse(self, event: Event, floor: int) -> NoReturn:
        """Refuse an event the caller found stale (at or below ``floor``, the applied floor raised by
        the chunk in flight) or over a full queue."""
        if event.event_id <= floor:
            raise InvalidState(
                f"event {event.event_id} is stale: ids at or below {floor} are already applied or in flight",
                code="stale_event",
                event_id=event.event_id,
            )
        raise CapacityExceeded(
            f"event queue full ({self.max_pending_events} pending); retry after the next chunk",
            code="queue_full",
            event_id=event.event_id,
        )

    def add(self, event: Event) -> None:
        self.pending[event.event_id] = event
        self.recent[event.event_id] = None
        while len(self.recent) > self.max_pending_events:
            self.recent.popitem(last=False)

    def ordered(self) -> list[Event]:
        return [self.pending[event_id] for event_id in sorted(self.pending)]

    def drop(self, event_id: int) -> None:
        """A refused event: gone from the queue and from the duplicate window."""
        self.pending.pop(event_id, None)
        self.recent.pop(event_id, None)

    def applied(self, event_ids: Sequence[int]) -> None:
        """A chunk that applied these committed: they leave the queue and raise its floor."""
        pending = self.pending
        for event_id in event_ids:
            del pending[event_id]
        self.floor = max((self.floor, *event_ids))

    def clear(self) -> None:
        """Reset: what was pending never applies, and its ids stay stale."""
        self.floor = max((self.floor, *self.pending))
        self.pending.clear()


class Seats:
    """Which seats of a shared world are taken, and which tracks each seat's player steers."""

    def __init__(self, players: Sequence[Sequence[str]]) -> None:
        #: Seat number (from 1) -> its tracks; empty: one player, who steers every track.
        self._tracks = {seat: frozenset(tracks) for seat, tracks in enumerate(players, start=1)}
        self.taken: set[int] = {OWNER}

    @property
    def num_players(self) -> int:
        """How many players the model takes (1 where it declares none)."""
        return max(1, len(self._tracks))

    def tracks(self, player: int) -> frozenset[str] | None:
        """The tracks ``player`` steers; None: every track (a one-player model)."""
        return self._tracks.get(player) if self._tracks else None

    def join(self) -> int:
        """Seat a new player in the lowest free seat, or refuse: the model takes no more."""
        free = [seat for seat in range(OWNER + 1, self.num_players + 1) if seat not in self.taken]
        if not free:
            raise CapacityExceeded(
                f"this world takes {self.num_players} player(s) and every seat is taken; "
                "retry once a player leaves",
                code="too_many_players",
            )
        self.taken.add(free[0])
        return free[0]

    def leave(self, player: int) -> None:
        """A player left: its seat is free (the owner's seat is the session's, never freed)."""
        if player != OWNER:
            self.taken.discard(player)

    def check(self, event: Event) -> None:
        """Refuse an event of a player not seated, or one that steers a track not its own or,
        from a player other than the owner, the world's prompt."""
        player = event.player
        if player not in self.taken:
            raise InvalidState(
                f"player {player} holds no seat in this world",
                code="player_not_seated",
                event_id=event.event_id,
            )
        if event.prompt is not None and player != OWNER:
            raise InvalidRequest(
                "only the session's owner (player 1) sets the world's prompt; send controls of your tracks",
                code="prompt_not_yours",
                param="prompt",
                event_id=event.event_id,
            )
        own = self.tracks(player)
        if own is None:
            return
        for control in event.controls:
            if control.track not in own:
                raise InvalidRequest(
                    f"track {control.track!r} is not player {player}'s; its tracks: {', '.join(sorted(own))}",
                    code="track_not_yours",
                    param="controls",
                    event_id=event.event_id,
                )


class Roster:
    """The seats of a world and each seated player's event queue.

    ``drawn_from`` is the queues the tick in flight drew from: a player who leaves and one who
    takes its seat meanwhile have different queues, so the newcomer's ids are never the leaver's.
    """

    def __init__(self, players: Sequence[Sequence[str]], max_pending_events: int) -> None:
        self.seats = Seats(players)
        self.max_pending_events = max_pending_events
        self._is_shared = bool(players)
        self.queues = {OWNER: EventQueue(max_pending_events)}
        self.drawn_from: dict[int, EventQueue] = {}

    def queue_for(self, event: Event) -> EventQueue:
        """The queue of the event's player, once its seat may send it (refused otherwise)."""
        queue = self.queues.get(event.player)
        if queue is None or self._is_shared:  # a one-player world's owner steers every track
            self.seats.check(event)
            queue = self.queues[event.player]
        return queue

    def join(self) -> int:
        player = self.seats.join()
        self.queues[player] = EventQueue(self.max_pending_events)
        return player

    def leave(self, player: int) -> None:
        if player != OWNER and player in self.seats.taken:
            self.seats.leave(player)
            del self.queues[player]

    def floor(self, player: int, in_flight: Plan | None) -> int:
        """The player's ids at or below this are stale: its committed floor, raised by the tick in flight."""
        queue = self.queues.get(player)
        floor = queue.floor if queue is not None else -1
        if in_flight is None or self.drawn_from.get(player) is not queue:
            return floor
        return max((floor, *(event_id for who, event_id in in_flight.applied if who == player)))

    def pending(self) -> list[Event]:
        """Every player's pending events for the next chunk, the owner's first, each in id order."""
        queues = self.queues
        if len(queues) == 1:
            return queues[OWNER].ordered()
        return [event for player in sorted(queues) for event in queues[player].ordered()]

    def draw(self) -> None:
        """The next chunk is planned: remember whose queues it drew from."""
        self.drawn_from = dict(self.queues)

    def applied(self, plan: Plan) -> None:
        """The chunk committed: its events leave their queues (not those of a player that left)."""
        if len(self.drawn_from) == 1:  # the owner alone
            self.queues[OWNER].applied(plan.meta.applied_event_ids)
            return
        for player, queue in self.drawn_from.items():
            if queue is self.queues.get(player):
                queue.applied([event_id for who, event_id in plan.applied if who == player])

    def drop(self, refused: tuple[Applied, ...]) -> list[Rejection]:
        """Drop the events a reducer refused; each player's client hears of its own."""
        rejections = []
        for player in sorted({player for player, _ in refused}):
            ids = tuple(event_id for who, event_id in refused if who == player)
            for event_id in ids:
                self.queues[player].drop(event_id)
            names = ", ".join(str(event_id) for event_id in ids)
            error = InvalidRequest(
                f"the control reducer refused event(s) {names}; they were dropped and the session goes on",
                code="event_rejected",
                event_id=ids[0],
            )
            rejections.append(Rejection(error, ids, player))
        return rejections
