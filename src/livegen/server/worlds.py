"""The ``/v1/worlds`` service: world sessions over WebSockets (docs/world-protocol.md).

One ``Connection`` per socket reads client messages in order, decodes them
(``protocol/world.py``), and calls its session's runner; the runner owns the
ordered path of messages back. The service owns the model (loaded in
``start``: in this process, or in ``--world-workers`` Ray actors), the
scheduler and the session manager, and reports readiness: not ready until the
model is loaded, nor while the KV pool is full.

Bad input never ends a session or the server: each bad message gets an
``error`` event (with the client's ``event_id`` where it had one) and the
connection reads on. A client that does not read its output is closed once
its unsent bytes pass ``--max-unsent-bytes`` (``server/budgets.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import logging
import uuid
from typing import TYPE_CHECKING, Any

from starlette.routing import BaseRoute, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from livegen.errors import (
    ConfigError,
    InvalidRequest,
    InvalidState,
    LivegenError,
    ProtocolError,
    RemoteProtocolError,
)
from livegen.logs import bind_session, log_event
from livegen.models.world import WorldModel
from livegen.protocol import world as wire
from livegen.runtime.workers import Worker
from livegen.runtime.world_runner import Options, Runner
from livegen.runtime.world_scheduler import Scheduler
from livegen.server.auth import select_subprotocol
from livegen.server.budgets import CLOSE_NOT_READING, NOT_READING_REASON
from livegen.world import ControlInput, Event, Manager, Status, thaw
from livegen.world.images import decode_seed_image

if TYPE_CHECKING:
    from livegen.runtime.ray_worker import Cluster
    from livegen.server.app import State

logger = logging.getLogger("livegen.world")
DEFAULT_MAX_PENDING_EVENTS = 64


class WorldService:
    name = "world"

    def __init__(self, state: State) -> None:
        assert state.world_model is not None
        self.state = state
        self.entry = state.world_model
        self.model: WorldModel | None = None
        self.scheduler: Scheduler | None = None
        self.manager: Manager | None = None
        self.connections: set[Connection] = set()
        #: The Ray connection when the model runs in Ray actors (``--world-workers``).
        self.cluster: Cluster | None = None
        if state.config.world_workers > 0 and importlib.util.find_spec("ray") is None:
            raise ConfigError("--world-workers needs Ray: pip install 'livegen[ray]'")

    def routes(self) -> list[BaseRoute]:
        return [WebSocketRoute("/v1/worlds", self._endpoint)]

    async def start(self) -> None:
        num_workers = self.state.config.world_workers
        headroom = self.state.config.world_realtime_headroom
        model: WorldModel | None = None
        if num_workers > 0:
            scheduler = Scheduler(
                workers=await self._start_ray_workers(num_workers), realtime_headroom=headroom
            )
        else:
            options = self.state.config.world_options()
            model = await asyncio.to_thread(self.state.registry.load, self.entry.name, options)
            scheduler = Scheduler(model, realtime_headroom=headroom)
        await scheduler.start()
        self.manager = Manager(
            tracks=scheduler.spec.controls,
            new_id=lambda: uuid.uuid4().hex[:12],
            max_sessions=self.state.config.max_sessions,
        )
        self.model, self.scheduler = model, scheduler

    async def stop(self) -> None:
        for connection in list(self.connections):
            await connection.shutdown()
        if self.scheduler is not None:
            await self.scheduler.stop()
        if self.cluster is not None:
            await self.cluster.close()

    async def _start_ray_workers(self, num_workers: int) -> list[Worker]:
        from livegen.runtime.ray_worker import Cluster

        self.cluster = await Cluster.connect(self.state.config.ray_address, num_workers)
        options = self.state.config.world_options()
        workers = await self.cluster.start_workers(self.entry.name, num_workers, options)
        log_event(logger, "world.workers_started", model=self.entry.name, num_workers=num_workers)
        return list(workers)

    def health(self) -> dict[str, Any]:
        report: dict[str, Any] = {"ready": False, "model": self.entry.name}
        if self.scheduler is None or self.manager is None:
            report["reason"] = "model loading"
            return report
        report.update(ready=True, sessions=len(self.manager), tombstones=len(self.manager.tombstones))
        workers = self.scheduler.workers
        if len(workers.workers) > 1:
            report["workers"] = [worker.name for worker in workers.workers]
        if lost := workers.lost_workers:
            report["workers_lost"] = lost
        pools = workers.kv_pools
        if pools:
            sessions = sum(pool.num_sessions for pool in pools)
            report["kv"] = {"sessions": sessions, "capacity": workers.kv_capacity}
        scheduler = self.scheduler
        if scheduler.tick_cost_s is not None:
            report["realtime"] = {
                "tick_ms": round(scheduler.tick_cost_s * 1000, 2),
                "load": round(scheduler.realtime_load(scheduler.num_sessions), 3),
            }
        if workers.is_full:
            is_running = len(lost) < len(workers.workers)
            report.update(ready=False, reason="KV pool full" if is_running else "no world worker is running")
        elif scheduler.is_realtime_full:
            report.update(ready=False, reason="realtime capacity full")
        return report

    def model_names(self) -> set[str]:
        return {self.entry.name, *self.entry.aliases}

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
            controls = [ControlInput.of(c.track, c.schema, c.data) for c in event.controls or ()]
            runner.accept(Event.of(event.event_id, event.prompt, controls, event.transition_chunks or 0))
            self.service.scheduler.wake()  # type: ignore[union-attr]
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
        if update.model is not None and update.model not in self.service.model_names():
            raise InvalidRequest(
                f"model {update.model!r} is not served here; /v1/worlds serves {self.service.entry.name!r}",
                code="model_not_found",
                param="session.model",
            )
        if self.runner is None:
            self._create(update)
            return
        self._reconfigure(self.runner, update)
        self.runner.send(wire.SessionUpdated(self._config(self.runner)))

    def _create(self, update: wire.SessionConfig) -> None:
        service = self.service
        if service.manager is None or service.scheduler is None:
            raise InvalidState("the world model is still loading; retry shortly", code="not_ready")
        seed_image = None
        if update.seed_image is not None:  # checked before anything is created: a refusal leaves no trace
            seed_image = decode_seed_image(update.seed_image, service.scheduler.spec, service.entry.name)
        session = service.manager.create(
            max_pending_events=update.max_pending_events or DEFAULT_MAX_PENDING_EVENTS,
            prompt=update.prompt or "",
            seed=update.seed or 0,
            seed_image=seed_image,
        )
        output = update.output or wire.OutputConfig()
        options = Options(
            pacing=update.pacing or "realtime",
            format=output.format,
            quality=output.quality,
            max_chunks_ahead=update.max_chunks_ahead or 4,
        )
        runner = Runner(
            session,
            service.manager,
            service.scheduler,
            self._send_text,
            self._send_bytes,
            options,
            on_error=self._count_error,
            max_unsent_bytes=service.state.config.max_unsent_bytes,
        )
        runner.send(wire.SessionCreated(self._config(runner)))
        try:
            runner.start()
        except RemoteProtocolError:
            session.begin_close()
            service.manager.finish_close(session.session_id, True)
            runner.abort_sending()
            raise
        self.runner = runner
        self.metrics.unsent_sources.add(self._unsent_bytes)
        self.metrics.sessions_total.labels(kind="world").inc()
        self.metrics.sessions_open.labels(kind="world").inc()
        log_event(logger, "world.session_created", session=session.session_id, seed=session.seed)

    def _reconfigure(self, runner: Runner, update: wire.SessionConfig) -> None:
        session = runner.session
        fixed = {
            "seed": (update.seed, session.seed),
            "prompt": (update.prompt, session.initial_prompt),
            "max_pending_events": (update.max_pending_events, session.max_pending_events),
        }
        if update.seed_image is not None:
            raise InvalidRequest(
                "session.seed_image is fixed once the session exists (give it in the first session.update)",
                code="invalid_request",
                param="session.seed_image",
            )
        for name, (asked, current) in fixed.items():
            if asked is not None and asked != current:
                raise InvalidRequest(
                    f"session.{name} is fixed once the session exists (send a world.event for a new prompt)",
                    code="invalid_request",
                    param=f"session.{name}",
                )
        options, output = runner.options, update.output
        runner.options = dataclasses.replace(  # a new object: a chunk mid-encode keeps its snapshot
            options,
            pacing=update.pacing or options.pacing,
            format=options.format if output is None else output.format,
            quality=options.quality if output is None else output.quality,
            max_chunks_ahead=update.max_chunks_ahead or options.max_chunks_ahead,
        )
        self.service.scheduler.wake()  # type: ignore[union-attr]

    def _config(self, runner: Runner) -> dict[str, Any]:
        spec, session, options = self.service.scheduler.spec, runner.session, runner.options  # type: ignore[union-attr]
        return {
            "id": session.session_id,
            "model": self.service.entry.name,
            "prompt": session.initial_prompt,
            "seed": session.seed,
            "seed_image": session.seed_image is not None,
            "pacing": options.pacing,
            "output": {"format": options.format, "quality": options.quality},
            "max_pending_events": session.max_pending_events,
            "max_chunks_ahead": options.max_chunks_ahead,
            "width": spec.width,
            "height": spec.height,
            "fps": spec.fps,
            "frames_per_chunk": spec.frames_per_chunk,
            "first_chunk_frames": spec.frames_in_chunk(0),
            "controls": [
                {
                    "track": track.name,
                    "schema": track.schema,
                    "json_schema": dict(track.json_schema),
                    "default": thaw(track.default),
                    "is_sticky": track.is_sticky,
                    "description": track.description,
                }
                for track in spec.controls
            ],
        }

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
