"""``SessionOwner``: one world socket's session, from its first message to its close.

The transport (``server/world/service.py``) accepts a socket, wraps it as a ``Link``
(send text, send bytes, receive, close with a code) and hands it to the engine
(``WorldEngine.serve``), which makes its owner; from
then on the owner does the engine's side of the conversation. It reads the
client's messages in order, decodes them (``protocol/world.py``) and
dispatches each as the table of ``world/lifecycle.py`` says: the first
``session.update`` opens the session through the engine (``WorldEngine.open``),
later ones reconfigure it, ``world.event``, ``chunk.ack``, ``world.reset`` and
``session.close`` go to the session's runner. It counts the session's metrics
(sessions, events in and out, errors, unsent bytes) and closes the session when
the socket ends.

Bad input never ends a session or the server: each bad message gets an
``error`` event (with the client's ``event_id`` where it had one) and the
owner reads on. A client that does not read its output is closed once its
unsent bytes pass ``--max-unsent-bytes`` (``server/http/budgets.py``). A bug of ours
fails this one session (close code 1011), logged once; never the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from livegen.errors import InvalidRequest, InvalidState, LivegenError, ProtocolError
from livegen.logs import bind_session, log_event
from livegen.protocol import world as wire
from livegen.runtime.closes import CLOSE_NOT_READING, NOT_READING_REASON
from livegen.tasks import TaskSet
from livegen.world import Status
from livegen.world.lifecycle import Action, Message, State, dispatch

if TYPE_CHECKING:
    from livegen.runtime.world.runner import Runner

logger = logging.getLogger("livegen.world")


class WorldEngine(Protocol):
    """The world engine as an owner uses it (``engine.WorldEngine``, which builds the owners:
    declared here so that the two do not import each other)."""

    def check_model(self, update: wire.SessionConfig) -> None: ...
    async def open(
        self,
        update: wire.SessionConfig,
        send_text: Callable[[str], Awaitable[None]],
        send_bytes: Callable[[bytes], Awaitable[None]],
        on_error: Callable[[str], None],
    ) -> Runner: ...
    def spectate_token(self, runner: Runner) -> None: ...
    def player_token(self, runner: Runner) -> None: ...
    def reconfigure(self, runner: Runner, update: wire.SessionConfig) -> None: ...
    def accept(self, runner: Runner, event: wire.WorldEvent) -> None: ...
    def describe(self, runner: Runner) -> dict[str, Any]: ...


#: Each client event as ``world/lifecycle.py``'s table tells them apart.
_MESSAGES: dict[type[wire.ClientEvent], Message] = {
    wire.SessionUpdate: Message.UPDATE,
    wire.WorldEvent: Message.EVENT,
    wire.ChunkAck: Message.ACK,
    wire.WorldReset: Message.RESET,
    wire.SessionClose: Message.CLOSE,
    wire.SpectateToken: Message.SPECTATE_TOKEN,
    wire.PlayerToken: Message.PLAYER_TOKEN,
}

#: Close code of a session failed by a bug of ours (RFC 6455 "internal error").
CLOSE_INTERNAL_ERROR = 1011


class LinkClosed(Exception):
    """The client is gone: a ``Link`` raises it from a send it can no longer make."""


class Link(Protocol):
    """A world client's socket as the owner sees it; the transport adapts its own to this."""

    async def send_text(self, text: str) -> None: ...

    async def send_bytes(self, data: bytes) -> None: ...

    async def receive(self) -> str | bytes | None:
        """The next message: text, or bytes; None once the client is gone."""
        ...

    async def close(self, code: int = 1000, reason: str = "") -> None: ...


@dataclasses.dataclass(slots=True)
class WorldSession:
    """What one socket holds of its session: the runner once the first ``session.update``
    made it, and whether ``session.close`` closed it (its socket may still read acks)."""

    runner: Runner | None = None
    is_closed: bool = False

    @property
    def state(self) -> State:
        """Where the session is in ``world/lifecycle.py``'s table."""
        return State.CLOSED if self.is_closed else State.NEW if self.runner is None else State.OPEN


class SessionOwner:
    """One client socket: decodes its messages in order and drives its session's runner."""

    __slots__ = ("_events_out", "_tasks", "engine", "link", "metrics", "session")

    def __init__(self, engine: WorldEngine, link: Link, metrics: Any) -> None:
        self.engine = engine
        self.link = link
        #: The server's Prometheus metrics (``server/metrics.py``).
        self.metrics = metrics
        self.session = WorldSession()
        self._events_out = metrics.events.labels(kind="world", direction="out")
        #: The socket's read and the overflow wait, cancelled and awaited when ``run`` ends.
        self._tasks = TaskSet()

    @property
    def runner(self) -> Runner | None:
        """The session's runner, once the first ``session.update`` made it."""
        return self.session.runner

    async def run(self) -> None:
        """Serve the socket until the client leaves, stops reading, or a bug fails the session."""
        receiving: asyncio.Task[str | bytes | None] | None = None
        events_in = self.metrics.events.labels(kind="world", direction="in")
        try:
            while True:
                receiving = receiving or self._tasks.spawn(self.link.receive())
                if not await self._received_before_overflow(receiving):
                    await self._close_not_reading()
                    break
                message, receiving = receiving.result(), None
                if message is None:
                    break
                events_in.inc()
                await self._handle(message)
        except LinkClosed:
            pass
        except Exception as exc:  # a bug of ours: this session fails, logged once; never the server
            logger.error(
                "world.connection_failed",
                exc_info=exc,
                extra={"fields": {"error": f"{type(exc).__name__}: {exc}"}},
            )
            with contextlib.suppress(Exception):
                await self.link.close(CLOSE_INTERNAL_ERROR, "internal error")
        finally:
            await self._tasks.aclose()
            await self.shutdown(is_disconnect=True)

    async def _received_before_overflow(self, receiving: asyncio.Task[Any]) -> bool:
        """Wait for the next message; False if the runner's output passed a budget first."""
        runner = self.session.runner
        if runner is None or (not runner.sender.is_overflowing and receiving.done()):
            await receiving
            return True
        overflow = self._tasks.spawn(runner.sender.overflowed.wait())
        try:
            await asyncio.wait({receiving, overflow}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            overflow.cancel()
        return not runner.sender.is_overflowing

    async def _close_not_reading(self) -> None:
        """The client does not read: drop its output and session now, then say why and close."""
        unsent = self._unsent_bytes()
        log_event(logger, "world.client_not_reading", logging.WARNING, unsent_bytes=unsent)
        self.metrics.refused.labels(code="unsent_bytes_exceeded").inc()
        await self.shutdown(is_disconnect=True)  # memory goes now; the socket may stay blocked
        error = InvalidState(NOT_READING_REASON, code="unsent_bytes_exceeded")
        self._count_error(error.code)
        with contextlib.suppress(Exception):  # written once the client reads, if it ever does
            await self._send_text(wire.encode(wire.error_event(error)).decode())
            await self.link.close(CLOSE_NOT_READING, NOT_READING_REASON)

    async def shutdown(self, *, is_disconnect: bool = False) -> None:
        """Close the session (its state is released) and stop sending; on a server stop
        (not a disconnect) what is queued is sent first and the socket is closed."""
        session = self.session
        runner, session.runner = session.runner, None
        if runner is None:
            return
        self.metrics.unsent_sources.discard(self._unsent_bytes)
        with bind_session(runner.session_id):
            if not session.is_closed:
                await runner.close(is_sending=False)
                self._closed()
            if is_disconnect:
                runner.abort_sending()
                await runner.stop()
            else:
                await runner.flush_and_stop()
                with contextlib.suppress(Exception):
                    await self.link.close()

    async def _handle(self, message: str | bytes) -> None:
        event_id: int | str | None = None
        try:
            if not isinstance(message, str):
                raise InvalidRequest("binary messages are not accepted; send JSON text")
            event = wire.decode_client(message)
            event_id = getattr(event, "event_id", None)
            await self._dispatch(event)
        except ProtocolError as error:
            await self._send_error(error.with_event_id(event_id))
        except LivegenError as error:
            log_event(logger, "world.error", logging.ERROR, error=repr(error))
            await self._send_error(InvalidState(f"internal error: {error}", code="internal_error"))

    async def _dispatch(self, event: wire.ClientEvent) -> None:
        action = dispatch(self.session.state, _MESSAGES[type(event)])
        if action is Action.NOT_CREATED:
            raise InvalidState("send session.update first to create the session", code="session_not_created")
        if action is Action.CLOSED:
            raise InvalidState("the session is closed", code="session_closed")
        if isinstance(event, wire.SessionUpdate):
            await self._update(event.session)
        elif action is Action.DRIVE:
            await self._drive(event)

    async def _drive(self, event: wire.ClientEvent) -> None:
        """A message for the open session's runner."""
        runner = self.session.runner
        assert runner is not None
        if isinstance(event, wire.WorldEvent):
            self.engine.accept(runner, event)
        elif isinstance(event, wire.ChunkAck):
            runner.ack(event.chunk_index, event.at)
        elif isinstance(event, wire.WorldReset):
            await runner.reset()
        elif isinstance(event, wire.SpectateToken):
            self.engine.spectate_token(runner)
        elif isinstance(event, wire.PlayerToken):
            self.engine.player_token(runner)
        elif isinstance(event, wire.SessionClose):
            await runner.close()
            if runner.session.status is Status.CLOSED:
                self.session.is_closed = True
                self._closed()

    async def _update(self, update: wire.SessionConfig) -> None:
        """``session.update`` (OPEN or RECONFIGURE): the first opens the session, later ones
        reconfigure it."""
        session, engine = self.session, self.engine
        engine.check_model(update)
        if session.runner is None:
            sends = (self._send_text, self.link.send_bytes)
            session.runner = await engine.open(update, *sends, self._count_error)
            self.metrics.unsent_sources.add(self._unsent_bytes)
            self.metrics.sessions_total.labels(kind="world").inc()
            self.metrics.sessions_open.labels(kind="world").inc()
            return
        engine.reconfigure(session.runner, update)
        session.runner.sender.send(wire.SessionUpdated(engine.describe(session.runner)))

    def _closed(self) -> None:
        self.metrics.sessions_open.labels(kind="world").dec()

    # -- output ----------------------------------------------------------------------------
    async def _send_error(self, error: ProtocolError) -> None:
        if self.session.runner is not None:
            self.session.runner.sender.send_error(error)
            return
        # No runner, so no sender task: this socket has no other writer now.
        self._count_error(error.code)
        await self._send_text(wire.encode(wire.error_event(error)).decode())

    def _unsent_bytes(self) -> int:
        runner = self.session.runner
        return runner.sender.unsent_bytes if runner is not None else 0

    def _count_error(self, code: str) -> None:
        self.metrics.errors.labels(kind="world", code=code).inc()

    async def _send_text(self, text: str) -> None:
        self._events_out.inc()
        await self.link.send_text(text)
