"""Players who join another's world session (``/v1/worlds?join=ID&token=T``).

The owner's session hands out a token (client event ``session.player_token``,
answered by ``session.player_token.created`` with the join URL; a new token
replaces the last, and each admits players until it expires). A player that
presents it takes the lowest free seat of the model's players (the core's
``world/players.py``), gets ``player.joined`` (the session object, its player
number and the tracks it steers), then every chunk from the next one on, as the
owner gets them, the owner's ``world.reset.done`` and ``session.closed``. Its
``world.event``s go to its own event queue (its ids are its own) and may set
only its own tracks; each is answered to it alone, as its errors are. The owner
keeps what is the session's: pacing, flow control (a player's ``chunk.ack`` is
taken and changes nothing), reset, close and tokens. A player that leaves, or
is dropped, frees its seat.

Like a spectator (``spectators.py``, whose bounded outbox it uses), a player
never slows the session: a chunk is only queued for it, and one that falls
``--max-unsent-bytes`` behind is dropped with 4002 and its seat freed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from livegen.errors import CapacityExceeded, InvalidRequest, InvalidState, LivegenError, ProtocolError
from livegen.logs import log_event
from livegen.models.world import Frames
from livegen.protocol import world as wire
from livegen.runtime.closes import CLOSE_NOT_READING, NOT_READING_REASON
from livegen.runtime.world.spectators import CLOSE_REFUSED, CLOSE_TRY_LATER, Spectator
from livegen.tasks import TaskSet

if TYPE_CHECKING:
    from livegen.runtime.world.owner import Link
    from livegen.runtime.world.runner import Runner

logger = logging.getLogger("livegen.world")


@dataclasses.dataclass(frozen=True)
class PlayerLimits:
    """How long a player token admits players, and how far behind a player may fall."""

    token_ttl_s: float
    max_unsent_bytes: int


class _Seat(Spectator):
    """One joined player: its outbox (a spectator's) and its player number."""

    def __init__(self, player: int, max_unsent_bytes: int) -> None:
        super().__init__(max_unsent_bytes)
        self.player = player

    def send(self, event: wire.ServerEvent) -> None:
        self.put(wire.encode(event).decode())

    def error(self, error: LivegenError) -> None:
        """An error for this player alone (the owner and the others go on)."""
        if not isinstance(error, ProtocolError):
            error = InvalidState(f"internal error: {error}", code="internal_error")
        self.send(wire.error_event(error))


class _Shared:
    """A session players may join: its token, its joined players, and the ``Tap`` that feeds them."""

    def __init__(self, runner: Runner, on_closed: Callable[[_Shared], None]) -> None:
        self.runner = runner
        self._on_closed = on_closed
        self.token = ""
        self.expires_at = 0.0
        self.seats: set[_Seat] = set()
        self.is_closed = False

    def chunk(self, header: wire.ChunkHeader, frames: Frames, encoded: Sequence[bytes]) -> None:
        if not self.seats:
            return
        text = wire.encode(header).decode()
        for seat in self.seats:
            seat.put(text)
            for frame in encoded:
                seat.put(frame)

    def event(self, event: dict[str, Any], player: int = 1) -> None:
        pass

    def reset(self) -> None:
        for seat in self.seats:
            seat.send(wire.ResetDone())

    def closed(self) -> None:
        self.is_closed = True
        for seat in self.seats:
            seat.send(wire.SessionClosed())
            seat.put(None)
        self._on_closed(self)


class Players:
    """Every world session that handed out a player token, and the players who joined them."""

    def __init__(self, limits: PlayerLimits, clock: Callable[[], float] = time.time) -> None:
        self.limits = limits
        self._clock = clock
        self._sessions: dict[str, _Shared] = {}

    def mint(self, runner: Runner) -> wire.PlayerTokenCreated:
        """A new token for the owner's session (the last one no longer admits anyone)."""
        if runner.session.seats.num_players < 2:
            raise InvalidRequest(
                "this world model takes one player; no one can join it", code="single_player_model"
            )
        session_id = runner.session_id
        shared = self._sessions.get(session_id)
        if shared is None or shared.is_closed:
            shared = self._sessions[session_id] = _Shared(runner, self._forget)
            runner.taps.append(shared)
        shared.token = secrets.token_urlsafe(24)
        shared.expires_at = self._clock() + self.limits.token_ttl_s
        url = f"/v1/worlds?join={session_id}&token={shared.token}"
        return wire.PlayerTokenCreated(session_id, shared.token, round(shared.expires_at, 3), url)

    def _forget(self, shared: _Shared) -> None:
        if self._sessions.get(shared.runner.session_id) is shared:
            del self._sessions[shared.runner.session_id]

    def admit(self, session_id: str, token: str) -> tuple[_Shared, _Seat]:
        """Seat a new player in ``session_id``, or a ``ProtocolError`` saying why not."""
        shared = self._sessions.get(session_id)
        if shared is None or not token or not hmac.compare_digest(shared.token.encode(), token.encode()):
            raise InvalidRequest(
                "no live world session has this id and player token; ask its owner for a token "
                "(client event session.player_token)",
                code="invalid_player_token",
                param="token",
            )
        if self._clock() >= shared.expires_at:
            raise InvalidRequest(
                "the player token has expired; ask the owner for a new one (session.player_token)",
                code="player_token_expired",
                param="token",
            )
        seat = _Seat(shared.runner.session.join(), self.limits.max_unsent_bytes)  # too_many_players
        shared.seats.add(seat)
        shared.runner.guests[seat.player] = seat.error
        return shared, seat

    def leave(self, shared: _Shared, seat: _Seat) -> None:
        """The player's seat is free; its pending events never apply."""
        shared.seats.discard(seat)
        shared.runner.guests.pop(seat.player, None)
        shared.runner.session.leave(seat.player)

    async def serve(
        self, session_id: str, token: str, link: Link, accept: Accept, describe: Describe
    ) -> None:
        """One joined player's socket, from its handshake (already accepted) to its close."""
        try:
            shared, seat = self.admit(session_id, token)
        except ProtocolError as error:
            code = CLOSE_TRY_LATER if isinstance(error, CapacityExceeded) else CLOSE_REFUSED
            with contextlib.suppress(Exception):
                await link.send_text(wire.encode(wire.error_event(error)).decode())
                await link.close(code, error.code or "refused")
            return
        runner = shared.runner
        log_event(logger, "world.player_joined", session=session_id, player=seat.player)
        tracks = sorted(runner.session.seats.tracks(seat.player) or ())
        seat.send(wire.PlayerJoined(describe(runner), seat.player, tracks))
        tasks = TaskSet()
        sender = tasks.spawn(seat.send_all(link))
        try:
            reader = tasks.spawn(_steer(seat, runner, link, accept))
            overflow = tasks.spawn(seat.overflowed.wait())
            await asyncio.wait({sender, reader, overflow}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await tasks.aclose()
            self.leave(shared, seat)
            log_event(logger, "world.player_left", session=session_id, player=seat.player)
        await _goodbye(seat, sender, link)


#: How a player's ``world.event`` reaches the session: ``WorldEngine.accept`` as that player.
Accept = Callable[["Runner", wire.WorldEvent, int], Any]
Describe = Callable[["Runner"], dict[str, Any]]


async def _steer(seat: _Seat, runner: Runner, link: Link, accept: Accept) -> None:
    """Read the player's messages until it leaves: its events steer its tracks; the session's
    own messages are the owner's, and refused."""
    while (message := await link.receive()) is not None:
        event_id: int | str | None = None
        try:
            if not isinstance(message, str):
                raise InvalidRequest("binary messages are not accepted; send JSON text")
            event = wire.decode_client(message)
            event_id = getattr(event, "event_id", None)
            if isinstance(event, wire.WorldEvent):
                seat.send(accept(runner, event, seat.player))
            elif not isinstance(event, wire.ChunkAck):  # flow control is the owner's
                raise InvalidState(
                    "only the session's owner (player 1) may update, reset or close it, or hand out tokens",
                    code="owner_only",
                )
        except ProtocolError as error:
            seat.error(error.with_event_id(event_id))


async def _goodbye(seat: _Seat, sender: asyncio.Future[None], link: Link) -> None:
    """Close a player that fell behind with 4002, or one whose session ended with 1000."""
    if seat.overflowed.is_set():
        log_event(logger, "world.player_not_reading", logging.WARNING)
        error = InvalidState(NOT_READING_REASON, code="unsent_bytes_exceeded")
        with contextlib.suppress(Exception):
            await link.send_text(wire.encode(wire.error_event(error)).decode())
            await link.close(CLOSE_NOT_READING, NOT_READING_REASON)
    elif sender.done() and not sender.cancelled() and sender.exception() is None:
        with contextlib.suppress(Exception):
            await link.close(1000)
