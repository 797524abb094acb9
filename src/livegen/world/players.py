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
the prompt. Sans-IO, as the rest of ``world/``: no clock, no ids, no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import NoReturn

from livegen.errors import CapacityExceeded, InvalidRequest, InvalidState
from livegen.world.events import Event

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
