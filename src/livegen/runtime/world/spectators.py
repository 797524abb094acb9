"""Spectators: read-only sockets that watch a live world session (``/v1/worlds?spectate=ID&token=T``).

The player's session hands out a token (client event ``session.spectate_token``,
answered by ``session.spectate_token.created``; a new token replaces the last,
and each lets spectators join until it expires). A spectator that presents it
gets ``spectate.started`` (the session object) and then every chunk from the
next one on: the same headers and encoded frames the player gets, the player's
``world.reset.done``, and ``session.closed`` when the session ends. Whatever a
spectator sends is refused (``spectator_read_only``); it cannot steer.

Spectators never slow the player or the model. Each chunk reaches them through
a ``Tap`` (``taps.py``) that only queues, per spectator, in an outbox
(``runtime/outbox.py``) bounded in bytes (``--max-unsent-bytes``): a
spectator whose outbox refuses a message is dropped at once,
with an ``unsent_bytes_exceeded`` error and close code 4002, by its own task.
Spectators are bounded per session and server-wide
(``--world-max-spectators-per-session``, ``--world-max-spectators``).
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

from livegen.errors import CapacityExceeded, InvalidRequest, InvalidState, ProtocolError
from livegen.logs import log_event
from livegen.models.world import Frames
from livegen.protocol import world as wire
from livegen.runtime.closes import CLOSE_NOT_READING, NOT_READING_REASON
from livegen.runtime.outbox import Bounds, Outbox
from livegen.tasks import TaskSet

if TYPE_CHECKING:
    from livegen.runtime.world.owner import Link
    from livegen.runtime.world.runner import Runner

logger = logging.getLogger("livegen.world")

#: Close code of a spectator refused at the door (wrong token, full): RFC 6455 "policy violation".
CLOSE_REFUSED = 1008
#: Close code of a spectator refused because spectators are full: RFC 6455 "try again later".
CLOSE_TRY_LATER = 1013


@dataclasses.dataclass(frozen=True)
class SpectatorLimits:
    """The server's spectator options (``ServerConfig`` states the defaults)."""

    per_session: int
    total: int
    token_ttl_s: float
    max_unsent_bytes: int


class Spectator:
    """One spectator's outbox; dropped (``overflowed``) once it would hold too many bytes."""

    def __init__(self, max_unsent_bytes: int) -> None:
        self._outbox: Outbox[str | bytes] = Outbox(Bounds(bytes=max_unsent_bytes))
        self.overflowed = asyncio.Event()

    @property
    def unsent_bytes(self) -> int:
        return self._outbox.num_bytes

    def put(self, message: str | bytes | None) -> None:
        """Queue a message; None: the session ended (what is queued is still written)."""
        if self.overflowed.is_set():
            return
        if message is None:
            self._outbox.close()
        elif not self._outbox.put(message, len(message)):
            self.overflowed.set()
            self._outbox.clear()  # its memory goes now, not when its socket does

    async def send_all(self, link: Link) -> None:
        """Write the outbox to the spectator's socket until the session ends."""

        async def write(message: str | bytes) -> None:
            if isinstance(message, str):
                await link.send_text(message)
            else:
                await link.send_bytes(message)

        await self._outbox.send_all(write)


class _Watched:
    """A session spectators may join: its token and its spectators, and the ``Tap`` that feeds them."""

    def __init__(self, runner: Runner, on_closed: Callable[[_Watched], None]) -> None:
        self.runner = runner
        self._on_closed = on_closed
        self.token = ""
        self.expires_at = 0.0
        self.spectators: set[Spectator] = set()
        self.is_closed = False

    def chunk(self, header: wire.ChunkHeader, frames: Frames, encoded: Sequence[bytes]) -> None:
        if not self.spectators:
            return
        text = wire.encode(header).decode()
        for spectator in self.spectators:
            spectator.put(text)
            for frame in encoded:
                spectator.put(frame)

    def event(self, event: dict[str, Any], player: int = 1) -> None:
        pass

    def reset(self) -> None:
        self._broadcast(wire.encode(wire.ResetDone()).decode())

    def closed(self) -> None:
        self.is_closed = True
        self._broadcast(wire.encode(wire.SessionClosed()).decode())
        for spectator in self.spectators:
            spectator.put(None)
        self._on_closed(self)

    def _broadcast(self, text: str) -> None:
        for spectator in self.spectators:
            spectator.put(text)


class Spectators:
    """Every world session that handed out a token, and the spectators watching them."""

    def __init__(self, limits: SpectatorLimits, clock: Callable[[], float] = time.time) -> None:
        self.limits = limits
        self._clock = clock
        self._sessions: dict[str, _Watched] = {}
        self.num_spectators = 0

    def mint(self, runner: Runner) -> wire.SpectateTokenCreated:
        """A new token for the session (the last one no longer admits anyone)."""
        session_id = runner.session_id
        watched = self._sessions.get(session_id)
        if watched is None or watched.is_closed:
            watched = self._sessions[session_id] = _Watched(runner, self._forget)
            runner.taps.append(watched)
        watched.token = secrets.token_urlsafe(24)
        watched.expires_at = self._clock() + self.limits.token_ttl_s
        url = f"/v1/worlds?spectate={session_id}&token={watched.token}"
        return wire.SpectateTokenCreated(session_id, watched.token, round(watched.expires_at, 3), url)

    def _forget(self, watched: _Watched) -> None:
        """The session ended: its token admits nobody now (its spectators leave on their own)."""
        if self._sessions.get(watched.runner.session_id) is watched:
            del self._sessions[watched.runner.session_id]

    def admit(self, session_id: str, token: str) -> tuple[_Watched, Spectator]:
        """A new spectator of ``session_id``, or a ``ProtocolError`` saying why not."""
        watched = self._sessions.get(session_id)
        if watched is None or not token or not hmac.compare_digest(watched.token.encode(), token.encode()):
            raise InvalidRequest(
                "no live world session has this id and spectate token; ask the player for a token "
                "(client event session.spectate_token)",
                code="invalid_spectate_token",
                param="token",
            )
        if self._clock() >= watched.expires_at:
            raise InvalidRequest(
                "the spectate token has expired; ask the player for a new one (session.spectate_token)",
                code="spectate_token_expired",
                param="token",
            )
        limits = self.limits
        if len(watched.spectators) >= limits.per_session or self.num_spectators >= limits.total:
            where = "this session" if len(watched.spectators) >= limits.per_session else "the server"
            raise CapacityExceeded(
                f"{where} has all the spectators it takes; retry later", code="too_many_spectators"
            )
        spectator = Spectator(limits.max_unsent_bytes)
        watched.spectators.add(spectator)
        self.num_spectators += 1
        return watched, spectator

    def leave(self, watched: _Watched, spectator: Spectator) -> None:
        if spectator in watched.spectators:
            watched.spectators.discard(spectator)
            self.num_spectators -= 1

    async def serve(
        self, session_id: str, token: str, link: Link, describe: Callable[[Runner], dict[str, Any]]
    ) -> None:
        """One spectator's socket, from its handshake (already accepted) to its close."""
        try:
            watched, spectator = self.admit(session_id, token)
        except ProtocolError as error:
            code = CLOSE_TRY_LATER if isinstance(error, CapacityExceeded) else CLOSE_REFUSED
            with contextlib.suppress(Exception):
                await link.send_text(wire.encode(wire.error_event(error)).decode())
                await link.close(code, error.code or "refused")
            return
        log_event(logger, "world.spectator_joined", session=session_id, spectators=len(watched.spectators))
        spectator.put(wire.encode(wire.SpectateStarted(describe(watched.runner))).decode())
        try:
            sender = await self._watch(spectator, link)
        finally:
            self.leave(watched, spectator)  # its place is free now, even while its socket lingers
        await _goodbye(spectator, sender, link)

    async def _watch(self, spectator: Spectator, link: Link) -> asyncio.Future[None]:
        """Until the session ends, the spectator leaves, or it falls too far behind."""
        tasks = TaskSet()
        sender = tasks.spawn(spectator.send_all(link))
        reader = tasks.spawn(_refuse_input(spectator, link))
        overflow = tasks.spawn(spectator.overflowed.wait())
        try:
            await asyncio.wait({sender, reader, overflow}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await tasks.aclose()
        return sender


async def _goodbye(spectator: Spectator, sender: asyncio.Future[None], link: Link) -> None:
    """Close a spectator that fell behind with 4002, or one whose session ended with 1000."""
    if spectator.overflowed.is_set():
        log_event(logger, "world.spectator_not_reading", logging.WARNING)
        error = InvalidState(NOT_READING_REASON, code="unsent_bytes_exceeded")
        with contextlib.suppress(Exception):  # written once the spectator reads, if it ever does
            await link.send_text(wire.encode(wire.error_event(error)).decode())
            await link.close(CLOSE_NOT_READING, NOT_READING_REASON)
    elif sender.done() and not sender.cancelled() and sender.exception() is None:
        with contextlib.suppress(Exception):  # the session ended: say goodbye
            await link.close(1000)


async def _refuse_input(spectator: Spectator, link: Link) -> None:
    """Read the spectator's messages until it leaves; each one is refused (it may not steer)."""
    while await link.receive() is not None:
        error = InvalidState(
            "a spectator is read-only: only the player's socket steers the session",
            code="spectator_read_only",
        )
        spectator.put(wire.encode(wire.error_event(error)).decode())
