"""``/v1/worlds``: the WebSocket transport of world sessions.

One ``Connection`` per socket reads client messages in order, decodes them
(``protocol/world.py``), and hands them to the ``WorldEngine``
(``runtime/world/engine.py``: the model, scheduler, session manager and
workers) or to its session's runner, which owns the ordered path of messages
back.

Bad input never ends a session or the server: each bad message gets an
``error`` event (with the client's ``event_id`` where it had one) and the
connection reads on. A client that does not read its output is closed once
its unsent bytes pass ``--max-unsent-bytes`` (``server/budgets.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from starlette.routing import BaseRoute, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from livegen.errors import InvalidRequest, InvalidState, LivegenError, ProtocolError
from livegen.logs import bind_session, log_event
from livegen.protocol import world as wire
from livegen.runtime.closes import CLOSE_NOT_READING, NOT_READING_REASON
from livegen.runtime.world.engine import WorldEngine, WorldSettings, logger
from livegen.runtime.world.runner import Runner
from livegen.server.auth import select_subprotocol
from livegen.world import Status

if TYPE_CHECKING:
    from livegen.server.app import State


class WorldService:
    name = "world"

    def __init__(self, state: State) -> None:
        assert state.world_model is not None
        self.state = state
        config = state.config
        settings = WorldSettings(
            max_sessions=config.max_sessions,
            max_unsent_bytes=config.max_unsent_bytes,
            world_workers=config.world_workers,
            ray_address=config.ray_address,
            realtime_headroom=config.world_realtime_headroom,
            model_options=config.world_options(),
        )
        self.engine = WorldEngine(state.registry, state.world_model, settings)
        self.connections: set[Connection] = set()

    def routes(self) -> list[BaseRoute]:
        return [WebSocketRoute("/v1/worlds", self._endpoint)]

    async def start(self) -> None:
        await self.engine.start()

    async def stop(self) -> None:
        for connection in list(self.connections):
            await connection.shutdown()
        await self.engine.stop()

    def health(self) -> dict[str, Any]:
        return self.engine.health()

    async def _endpoint(self, websocket: WebSocket) -> None:
        await websocket.accept(subprotocol=select_subprotocol(websocket.scope))
        connection = Connection(self, websocket)
        self.connections.add(connection)
        try:
            await connection.run()
        finally:
            self.connections.discard(connection)


class Connection:
    """One client socket: decodes its messages in order and drives its session's runner."""

    def __init__(self, service: WorldService, websocket: WebSocket) -> None:
        self.service = service
        self.websocket = websocket
        self.metrics = service.state.metrics
        self.runner: Runner | None = None
        self.is_closed = False

    async def run(self) -> None:
        receiving: asyncio.Task[Any] | None = None
        try:
            while True:
                receiving = receiving or asyncio.ensure_future(self.websocket.receive())
                if not await self._received_before_overflow(receiving):
                    await self._close_not_reading()
                    break
                message, receiving = receiving.result(), None
                if message["type"] == "websocket.disconnect":
                    break
                self.metrics.events.labels(kind="world", direction="in").inc()
                await self._handle(message.get("text"), message.get("bytes"))
        except WebSocketDisconnect:
            pass
        except Exception as exc:  # a bug of ours: this session fails, logged once; never the server
            logger.error(
                "world.connection_failed",
                exc_info=exc,
                extra={"fields": {"error": f"{type(exc).__name__}: {exc}"}},
            )
            with contextlib.suppress(Exception):
                await self.websocket.close(code=1011, reason="internal error")
        finally:
            if receiving is not None:
                receiving.cancel()
            await self.shutdown(is_disconnect=True)

    async def _received_before_overflow(self, receiving: asyncio.Task[Any]) -> bool:
        """Wait for the next message; False if the runner's output passed a budget first."""
        runner = self.runner
        if runner is None or (not runner.is_overflowing and receiving.done()):
            await receiving
            return True
        overflow = asyncio.ensure_future(runner.overflowed.wait())
        try:
            await asyncio.wait({receiving, overflow}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            overflow.cancel()
        return not runner.is_overflowing

    async def _close_not_reading(self) -> None:
        """The client does not read: drop its output and session now, then say why and close."""
        unsent = self.runner.unsent_bytes if self.runner is not None else 0
        log_event(logger, "world.client_not_reading", logging.WARNING, unsent_bytes=unsent)
        self.metrics.refused.labels(code="unsent_bytes_exceeded").inc()
        await self.shutdown(is_disconnect=True)  # memory goes now; the socket may stay blocked
        error = InvalidState(NOT_READING_REASON, code="unsent_bytes_exceeded")
        self._count_error(error.code)
        with contextlib.suppress(Exception):  # written once the client reads, if it ever does
            await self._send_text(wire.encode(wire.error_event(error)).decode())
            await self.websocket.close(code=CLOSE_NOT_READING, reason=NOT_READING_REASON)

    async def shutdown(self, *, is_disconnect: bool = False) -> None:
        """Close the session (its state is released) and stop sending."""
        runner, self.runner = self.runner, None
        if runner is None:
            return
        self.metrics.unsent_sources.discard(self._unsent_bytes)
        with bind_session(runner.session_id):
            if not self.is_closed:
                await runner.close(is_sending=False)
                self._closed()
            if is_disconnect:
                runner.abort_sending()
            else:
                await runner.flush_and_stop()
                with contextlib.suppress(Exception):
                    await self.websocket.close()

    async def _handle(self, text: str | None, data: bytes | None) -> None:
        event_id: int | str | None = None
        try:
            if text is None:
                raise InvalidRequest("binary messages are not accepted; send JSON text")
            event = wire.decode_client(text)
            event_id = getattr(event, "event_id", None)
            await self._dispatch(event)
        except ProtocolError as error:
            await self._send_error(error.with_event_id(event_id))
        except LivegenError as error:
            log_event(logger, "world.error", logging.ERROR, error=repr(error))
            await self._send_error(InvalidState(f"internal error: {error}", code="internal_error"))

    async def _dispatch(self, event: wire.ClientEvent) -> None:
        if isinstance(event, wire.SessionUpdate):
            await self._update(event.session)
            return
        if isinstance(event, wire.ChunkAck) and self.is_closed:
            return  # acks of chunks that were in flight at close are moot, not errors
        runner = self._require_session()
        if isinstance(event, wire.WorldEvent):
            self.service.engine.accept(runner, event)
        elif isinstance(event, wire.ChunkAck):
            runner.ack(event.chunk_index, event.at)
        elif isinstance(event, wire.WorldReset):
            await runner.reset()
        elif isinstance(event, wire.SessionClose):
            await runner.close()
            if runner.session.status is Status.CLOSED:
                self.is_closed = True
                self._closed()

    def _require_session(self) -> Runner:
        if self.is_closed:
            raise InvalidState("the session is closed", code="session_closed")
        if self.runner is None:
            raise InvalidState("send session.update first to create the session", code="session_not_created")
        return self.runner

    def _closed(self) -> None:
        self.metrics.sessions_open.labels(kind="world").dec()

    # -- session.update --------------------------------------------------------------------
    async def _update(self, update: wire.SessionConfig) -> None:
        if self.is_closed:
            raise InvalidState("the session is closed", code="session_closed")
        engine = self.service.engine
        engine.check_model(update)
        if self.runner is None:
            self.runner = engine.open(update, self._send_text, self._send_bytes, self._count_error)
            self.metrics.unsent_sources.add(self._unsent_bytes)
            self.metrics.sessions_total.labels(kind="world").inc()
            self.metrics.sessions_open.labels(kind="world").inc()
            return
        engine.reconfigure(self.runner, update)
        self.runner.send(wire.SessionUpdated(engine.describe(self.runner)))

    # -- output ----------------------------------------------------------------------------
    async def _send_error(self, error: ProtocolError) -> None:
        if self.runner is not None:
            self.runner.send_error(error)
            return
        # No runner, so no sender task: this socket has no other writer now.
        self._count_error(error.code)
        await self._send_text(wire.encode(wire.error_event(error)).decode())

    def _unsent_bytes(self) -> int:
        return self.runner.unsent_bytes if self.runner is not None else 0

    def _count_error(self, code: str) -> None:
        self.metrics.errors.labels(kind="world", code=code).inc()

    async def _send_text(self, text: str) -> None:
        self.metrics.events.labels(kind="world", direction="out").inc()
        await self.websocket.send_text(text)

    async def _send_bytes(self, data: bytes) -> None:
        await self.websocket.send_bytes(data)
