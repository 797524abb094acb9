"""``/v1/realtime``: voice sessions over the OpenAI Realtime WebSocket protocol.

The service resolves the model per connection (``?model=`` or the configured
default), loads it once per process, opens one model stream per session and
hands the socket to a ``runtime.voice.Runner``. This module only moves bytes:
it decodes each text message (a decoding error is answered on the same socket,
and the session goes on) and writes what the runner sends. Refusals before a
session exists (unknown model, not ready, too many sessions) are an ``error``
event followed by a close, so an SDK sees OpenAI's error shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
from typing import TYPE_CHECKING, Any

from starlette.routing import BaseRoute, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from livegen.errors import ConfigError, RemoteProtocolError
from livegen.logs import bind_session, log_event
from livegen.models import Kind
from livegen.models.registry import OPENAI_REALTIME_PATTERNS, ServedNames
from livegen.models.voice import StreamConfig, VoiceModel, VoiceStream
from livegen.protocol import errors as wire_errors
from livegen.protocol import realtime as wire
from livegen.protocol.beta import to_beta, wants_beta
from livegen.runtime.attachment import Attachment, JournalGap
from livegen.runtime.voice import FAILED_CLOSE_CODE, Runner, RunnerLimits
from livegen.server.auth import offered_subprotocols, select_subprotocol
from livegen.server.budgets import CLOSE_NOT_READING
from livegen.server.resume import Handoff, Resumable, new_token, read_resume, resumed_event
from livegen.voice.session import Limits, ModelFacts, Session

if TYPE_CHECKING:
    from livegen.server.app import State

logger = logging.getLogger("livegen.server.realtime")

#: Close code for a socket whose session was resumed on another connection.
REPLACED = 4001
#: A client that closes with these meant to leave; any other loss parks the session for a resume.
CLEAN_CLOSE_CODES = frozenset({1000, 1001})


class RealtimeService:
    name = "voice"

    def __init__(self, state: State, limits: Limits | None = None) -> None:
        self.state = state
        self.limits = limits or Limits()
        assert state.voice_model is not None
        self.default_model = state.voice_model.name
        config = state.config
        patterns = OPENAI_REALTIME_PATTERNS + tuple(config.model_aliases)
        #: Requested model names -> the model that answers (``--served-model-name``, ``--model-alias``).
        self.names = ServedNames(
            state.registry, self.default_model, tuple(config.served_model_names), patterns
        )
        self.models: dict[str, VoiceModel] = {}
        self.runners: set[Runner] = set()
        #: Sessions by id, for resuming connections, and the tasks that own them.
        self.live: dict[str, Resumable] = {}
        self.owners: set[asyncio.Task[None]] = set()
        self._load_lock = asyncio.Lock()

    def routes(self) -> list[BaseRoute]:
        return [WebSocketRoute("/v1/realtime", self.endpoint)]

    async def start(self) -> None:
        await self._model(self.default_model)

    async def stop(self) -> None:
        for runner in list(self.runners):
            await runner.stop("server_shutdown")
        for runner in list(self.runners):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(runner.done.wait(), 5.0)
        if self.owners:  # parked sessions end with their runners; let them clean up
            await asyncio.wait(set(self.owners), timeout=5.0)

    def health(self) -> dict[str, Any]:
        return {
            "ready": self.default_model in self.models,
            "model": self.default_model,
            "sessions": len(self.runners),
        }

    async def _model(self, name: str) -> VoiceModel:
        entry = self.state.registry.get(self.names.resolve(name))
        if entry.kind is not Kind.VOICE:
            raise ConfigError(f"model {name!r} is a {entry.kind} model, not a voice model")
        if entry.name not in self.models:
            async with self._load_lock:
                if entry.name not in self.models:
                    model = await asyncio.to_thread(self.state.registry.load, entry.name)
                    config = self.state.config
                    if config.llm_base_url and hasattr(model, "use_llm"):  # --llm-base-url, --llm-model
                        model.use_llm(config.llm_base_url, config.llm_model)
                    self.models[entry.name] = model
        return self.models[entry.name]

    async def _refuse(
        self, websocket: WebSocket, error: wire_errors.WireError, close_code: int, **fields: Any
    ) -> None:
        await self._send_error(websocket, error.error(**fields))
        await websocket.close(close_code)

    async def _send_error(self, websocket: WebSocket, error: RemoteProtocolError) -> None:
        """An OpenAI-shaped error outside any session (refusals, failed resumes), counted."""
        self.state.metrics.errors.labels(kind="voice", code=error.code).inc()
        event = {"type": "error", "event_id": "event_refused", "error": error.to_error_body()}
        await websocket.send_text(wire.encode(event).decode())

    async def endpoint(self, websocket: WebSocket) -> None:
        await websocket.accept(subprotocol=select_subprotocol(websocket.scope))
        resume_id = websocket.query_params.get("session_id")
        if resume_id is not None:
            await self._resume(websocket, resume_id)
            return
        requested = websocket.query_params.get("model") or self.default_model
        if self.default_model not in self.models:
            await self._refuse(websocket, wire_errors.MODEL_NOT_READY, 1013)
            return
        try:
            name = self.names.canonical(requested)
            model = await self._model(name)
        except ConfigError:
            log_event(logger, "voice.model_not_found", logging.WARNING, requested=requested)
            await self._refuse(websocket, wire_errors.MODEL_NOT_FOUND, 1008, model=requested)
            return
        if len(self.runners) >= self.state.config.max_sessions:
            limit = self.state.config.max_sessions
            await self._refuse(websocket, wire_errors.TOO_MANY_SESSIONS, 1013, limit=limit)
            return
        session_id = "sess_" + secrets.token_hex(8)
        released = asyncio.Event()
        with bind_session(session_id):
            # The session is a task of the service, not of this handler: when the socket goes,
            # the handler returns (so a server shutdown never waits for a parked session) and
            # the session waits for a resume on its own.
            log_event(logger, "voice.model_resolved", requested=requested, model=name)
            owner = asyncio.create_task(self._serve(websocket, released, session_id, name, model))
        self.owners.add(owner)
        owner.add_done_callback(self.owners.discard)
        await released.wait()

    async def _resume(self, websocket: WebSocket, session_id: str) -> None:
        """A connection re-attaching to a live session: check, hand over, wait until released."""
        try:
            event = await read_resume(websocket, session_id)
        except RemoteProtocolError as error:
            await self._send_error(websocket, error)
            await websocket.close(1008)
            return
        except WebSocketDisconnect:
            return
        live = self.live.get(session_id)
        if live is None or not live.check(event.resume_token):
            if live is None:
                await self._refuse(
                    websocket, wire_errors.SESSION_NOT_FOUND, 1008, detail="no live session with that id"
                )
            else:
                await self._refuse(websocket, wire_errors.INVALID_RESUME_TOKEN, 1008)
            return
        handoff = Handoff(websocket, event.last_event_seq, event.event_id)
        await live.handoffs.put(handoff)
        with bind_session(session_id):
            await handoff.released.wait()

    async def _serve(
        self, websocket: WebSocket, released: asyncio.Event, session_id: str, name: str, model: VoiceModel
    ) -> None:
        counter = itertools.count(1)
        tag = session_id[5:13]

        def ids(prefix: str) -> str:
            return f"{prefix}_{tag}{next(counter):x}"

        facts = ModelFacts(name, model.input_rate, model.output_rate, model.has_vad)
        session = Session(session_id, facts, ids, self.limits, canonical_name=self.names.canonical)
        metrics = self.state.metrics
        try:
            stream = await model.open(session_id, session.config.stream_config())
        except Exception as exc:  # one model failing to open a stream fails this session only
            log_event(logger, "voice.open_failed", logging.ERROR, error=str(exc))
            await self._refuse(websocket, wire_errors.MODEL_OPEN_FAILED, 1011, model=name, detail=exc)
            return
        events_out = metrics.events.labels(kind="voice", direction="out")
        events_in = metrics.events.labels(kind="voice", direction="in")

        def on_sent(event: dict[str, Any]) -> None:
            events_out.inc()
            if event["type"] == "error":
                metrics.errors.labels(kind="voice", code=str(event["error"].get("code"))).inc()

        async def open_model(name: str, config: StreamConfig) -> tuple[ModelFacts, VoiceStream]:
            try:
                model = await self._model(name)
            except ConfigError:
                raise wire_errors.MODEL_NOT_FOUND.error(model=name, param="session.model") from None
            try:
                stream = await model.open(session_id, config)
            except Exception as exc:
                failed = wire_errors.MODEL_OPEN_FAILED
                raise failed.error(model=name, detail=exc, param="session.model") from exc
            return ModelFacts(name, model.input_rate, model.output_rate, model.has_vad), stream

        beta = wants_beta(dict(websocket.headers), offered_subprotocols(websocket.scope))
        attachment = Attachment(websocket.send_text)
        live: Resumable | None = None

        def outgoing(event: dict[str, Any]) -> dict[str, Any]:
            if event["type"] == "session.created" and live is not None:
                event = {**event, "resume_token": live.token}
            return to_beta(event) if beta else event

        runner = Runner(
            session,
            stream,
            attachment.send,
            limits=RunnerLimits(outbox_bytes=self.state.config.max_unsent_bytes),
            on_sent=on_sent,
            open_model=open_model,
            dialect=outgoing,
        )
        live = Resumable(runner, attachment)
        self.runners.add(runner)
        self.live[session_id] = live
        metrics.sessions_open.labels(kind="voice").inc()
        metrics.sessions_total.labels(kind="voice").inc()

        def unsent_bytes() -> int:
            return runner.outbox_bytes

        metrics.unsent_sources.add(unsent_bytes)
        log_event(logger, "voice.session_opened", model=name, dialect="beta" if beta else "ga")
        run = asyncio.create_task(runner.run())
        socket: WebSocket | None = websocket
        socket_released: asyncio.Event | None = released
        try:
            while True:
                if socket is not None:
                    outcome = await self._hold(socket, live, run, events_in)
                    if outcome is None:
                        break
                    code = REPLACED if isinstance(outcome, Handoff) else 1000
                    await self._retire(socket, socket_released, code)
                    socket, socket_released = None, None
                    if not isinstance(outcome, Handoff):
                        continue
                    handoff = outcome
                elif (parked := await self._park(live, run)) is not None:
                    handoff = parked
                else:
                    break
                if await self._take(session_id, live, handoff):
                    socket, socket_released = handoff.websocket, handoff.released
                else:
                    await self._retire(handoff.websocket, handoff.released, 1008)
        finally:
            await runner.stop("client_disconnected")
            with contextlib.suppress(Exception):
                await run
            self.runners.discard(runner)
            self.live.pop(session_id, None)
            metrics.sessions_open.labels(kind="voice").dec()
            metrics.unsent_sources.discard(unsent_bytes)
            is_not_reading = runner.close_reason == "outbox_overflow"
            if is_not_reading:  # the error and session.closed, written if the client reads again
                metrics.refused.labels(code="unsent_bytes_exceeded").inc()
                for text in runner.take_unsent():
                    await attachment.send(text)
            code = CLOSE_NOT_READING if is_not_reading else FAILED_CLOSE_CODE if runner.failed else 1000
            await self._retire(socket, socket_released, code)
            released.set()
            await self._turn_away(live)
            log_event(logger, "voice.session_closed", stale_outputs=session.num_stale_outputs)

    async def _hold(
        self, socket: WebSocket, live: Resumable, run: asyncio.Task[None], counter: Any
    ) -> Handoff | bool | None:
        """Serve ``socket`` until the session ends (None), the socket is lost (False) or a resume
        takes the session over (the handoff)."""
        reader = asyncio.create_task(self._read(socket, live.runner, counter))
        handoff = asyncio.create_task(live.handoffs.get())
        try:
            await asyncio.wait({reader, run, handoff}, return_when=asyncio.FIRST_COMPLETED)
            if handoff.done():
                return handoff.result()
            if run.done() or reader.result() in CLEAN_CLOSE_CODES:
                return None  # over, or the client said goodbye: nothing to resume
            return False
        finally:
            reader.cancel()
            handoff.cancel()

    async def _park(self, live: Resumable, run: asyncio.Task[None]) -> Handoff | None:
        """No socket: wait up to the grace period for a resume (None: the session ends)."""
        grace = self.state.config.resume_grace_s
        if run.done() or grace <= 0:
            return None
        live.attachment.detach()
        log_event(logger, "voice.session_parked", grace_s=grace)
        handoff = asyncio.create_task(live.handoffs.get())
        try:
            done, _ = await asyncio.wait({run, handoff}, timeout=grace, return_when=asyncio.FIRST_COMPLETED)
        finally:
            handoff.cancel()
        if handoff in done:
            return handoff.result()
        log_event(logger, "voice.session_expired" if not done else "voice.session_ended_parked")
        return None

    async def _retire(self, socket: WebSocket | None, released: asyncio.Event | None, code: int) -> None:
        """Close a socket the session no longer uses, and let its handler return."""
        if socket is not None:
            with contextlib.suppress(Exception):
                await socket.close(code)
        if released is not None:
            released.set()

    async def _turn_away(self, live: Resumable) -> None:
        """Resumes that arrived as the session ended: tell them, and let their handlers return."""
        while not live.handoffs.empty():
            handoff = live.handoffs.get_nowait()
            ended = wire_errors.SESSION_NOT_FOUND
            await self._refuse(handoff.websocket, ended, 1008, detail="the session has ended")
            handoff.released.set()

    async def _take(self, session_id: str, live: Resumable, handoff: Handoff) -> bool:
        """Attach the resuming socket: greeting, replay, live. A refused replay (a gap in the
        journal, a seq never sent) is an error on the new socket; the session stays parked."""
        live.attachment.detach()
        token = new_token()
        greeting = resumed_event(session_id, token, handoff.last_seq, live.attachment.seq)
        try:
            replayed = await live.attachment.attach(handoff.websocket.send_text, handoff.last_seq, greeting)
        except (JournalGap, ValueError) as exc:
            kind = wire_errors.RESUME_GAP if isinstance(exc, JournalGap) else wire_errors.INVALID_VALUE
            error = kind.error(detail=exc, param="last_event_seq", event_id=handoff.event_id)
            with contextlib.suppress(Exception):
                await self._send_error(handoff.websocket, error)
            return False
        except Exception:  # the new socket died during the replay: parked again, events kept
            live.attachment.detach()
            return False
        live.token = token
        log_event(logger, "voice.session_resumed", last_seq=handoff.last_seq, replayed=replayed)
        return True

    async def _read(self, websocket: WebSocket, runner: Runner, counter: Any) -> int:
        """Pass client events to the runner until the socket closes; returns its close code."""
        while True:
            try:
                message = await websocket.receive()
            except WebSocketDisconnect as gone:
                return gone.code
            if message["type"] == "websocket.disconnect":
                return int(message.get("code", 1006))
            counter.inc()
            try:
                event: wire.ClientEvent | RemoteProtocolError = wire.decode_message(message)
            except RemoteProtocolError as error:
                event = error
            await runner.put_client(event)
