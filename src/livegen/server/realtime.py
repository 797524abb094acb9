"""``/v1/realtime``: voice sessions over the OpenAI Realtime WebSocket protocol.

The service resolves the model per connection (``?model=`` or the configured
default), loads it once per process, opens one model stream per session and
hands the socket to a ``runtime.voice.Runner``. This module only moves bytes:
it decodes each text message (a decoding error is answered on the same socket,
and the session goes on) and writes what the runner sends. Refusals before a
session exists (unknown model, not ready, too many sessions) are an ``error``
event followed by a close, so an SDK sees OpenAI's error shape.

A session whose socket is lost is *parked* for ``--resume-grace``: parked
sessions have their own budget (``--max-parked-sessions``, and
``--max-parked-bytes`` of journal and history), apart from ``--max-sessions``,
which counts live ones only, so that dropped clients never lock new ones out.
Parking past the budget ends the oldest parked sessions first.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec
from starlette.routing import BaseRoute, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from livegen.errors import ConfigError, RemoteProtocolError
from livegen.logs import bind_session, log_event
from livegen.models import Kind
from livegen.models.registry import OPENAI_REALTIME_PATTERNS, ServedNames
from livegen.models.voice import StreamConfig, VoiceModel, VoiceStream
from livegen.protocol import duplex
from livegen.protocol import errors as wire_errors
from livegen.protocol import realtime as wire
from livegen.protocol.realtime import server as ev
from livegen.protocol.realtime.beta import to_beta, wants_beta
from livegen.runtime.attachment import Attachment, JournalGap, new_token
from livegen.runtime.voice import FAILED_CLOSE_CODE, Dialect, Runner, RunnerLimits
from livegen.server.auth import offered_subprotocols, presented_key, select_subprotocol
from livegen.server.budgets import CLOSE_NOT_READING
from livegen.server.client_secrets import ClientSecrets
from livegen.server.client_secrets import routes_for as client_secrets_routes
from livegen.server.resume import Handoff, Resumable, first_text, read_resume, resumed_event
from livegen.voice.session import Limits, ModelFacts, Session

if TYPE_CHECKING:
    from livegen.server.app import State
    from livegen.server.webrtc import CallService

logger = logging.getLogger("livegen.server.realtime")

#: Close code for a socket whose session was resumed on another connection.
REPLACED = 4001
#: A client that closes with these meant to leave; any other loss parks the session for a resume.
CLEAN_CLOSE_CODES = frozenset({1000, 1001})
#: How long a replaced socket may take to close (its peer may not be reading) before we let go.
RETIRE_TIMEOUT_S = 5.0


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
        #: Sessions without a socket, waiting for a resume, oldest first.
        self.parked: dict[str, Resumable] = {}
        self.owners: set[asyncio.Task[None]] = set()
        self._load_lock = asyncio.Lock()
        #: Ephemeral client keys (``/v1/realtime/client_secrets``), shared with the auth middleware.
        self.client_secrets: ClientSecrets = state.client_secrets
        #: The WebRTC transport (``server/webrtc.py``), when aiortc is installed (the ``webrtc`` extra).
        self.calls: CallService | None = None
        with contextlib.suppress(ImportError):
            import aiortc  # noqa: F401

            from livegen.server.webrtc import CallService

            self.calls = CallService(self)

    def routes(self) -> list[BaseRoute]:
        routes: list[BaseRoute] = [WebSocketRoute("/v1/realtime", self.endpoint)]
        routes += client_secrets_routes(self.client_secrets, lambda: self.default_model)
        if self.calls is not None:
            routes += self.calls.routes()
        return routes

    async def start(self) -> None:
        await self._model(self.default_model)

    async def stop(self) -> None:
        if self.calls is not None:
            await self.calls.stop()
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
            "live_sessions": len(self.runners) - len(self.parked),
            "parked_sessions": len(self.parked),
            "parked_bytes": self.parked_bytes(),
        }

    def parked_bytes(self) -> int:
        return sum(live.held_bytes() for live in self.parked.values())

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
                        model.use_llm(
                            config.llm_base_url, config.llm_model, context_tokens=config.llm_context_tokens
                        )
                    self.models[entry.name] = model
        return self.models[entry.name]

    async def admit(self, requested: str) -> tuple[str, VoiceModel]:
        """Whether a new session may open, for any transport: the model has loaded, ``requested``
        is served, and there is room under ``--max-sessions``; raises OpenAI's error if not."""
        if self.default_model not in self.models:
            raise wire_errors.MODEL_NOT_READY.error()
        try:
            name = self.names.canonical(requested)
            model = await self._model(name)
        except ConfigError:
            log_event(logger, "voice.model_not_found", logging.WARNING, requested=requested)
            raise wire_errors.MODEL_NOT_FOUND.error(model=requested) from None
        if len(self.runners) - len(self.parked) >= self.state.config.max_sessions:
            raise wire_errors.TOO_MANY_SESSIONS.error(limit=self.state.config.max_sessions)
        return name, model

    async def open_runner(
        self,
        session_id: str,
        name: str,
        model: VoiceModel,
        send_text: Callable[[str], Awaitable[None]],
        dialect: Dialect | None = None,
        session_type: str = "realtime",
    ) -> Runner:
        """The engine half of a session, shared by every transport (WebSocket, WebRTC): the
        session core, its model stream and its runner, counted in the service. Raises
        OpenAI's error when the model cannot open a stream. ``enlist`` starts the count."""
        counter = itertools.count(1)
        tag = session_id[5:13]

        def ids(prefix: str) -> str:
            return f"{prefix}_{tag}{next(counter):x}"

        facts = ModelFacts(name, model.input_rate, model.output_rate, model.has_vad)
        canonical = self.names.canonical
        session = Session(
            session_id, facts, ids, self.limits, canonical_name=canonical, session_type=session_type
        )
        try:
            stream = await model.open(session_id, session.config.stream_config())
        except Exception as exc:  # one model failing to open a stream fails this session only
            log_event(logger, "voice.open_failed", logging.ERROR, error=str(exc))
            raise wire_errors.MODEL_OPEN_FAILED.error(model=name, detail=exc) from exc
        return Runner(
            session,
            stream,
            send_text,
            limits=RunnerLimits(outbox_bytes=self.state.config.max_unsent_bytes),
            on_sent=self._on_sent,
            open_model=functools.partial(self._open_model, session_id),
            dialect=dialect,
        )

    def enlist(self, runner: Runner) -> Callable[[], None]:
        """Count a runner's session as live (``--max-sessions``, metrics); returns the undo."""
        metrics = self.state.metrics
        self.runners.add(runner)
        metrics.sessions_open.labels(kind="voice").inc()
        metrics.sessions_total.labels(kind="voice").inc()

        def unsent_bytes() -> int:
            return runner.outbox_bytes

        metrics.unsent_sources.add(unsent_bytes)

        def undo() -> None:
            self.runners.discard(runner)
            metrics.sessions_open.labels(kind="voice").dec()
            metrics.unsent_sources.discard(unsent_bytes)

        return undo

    def _on_sent(self, event: ev.ServerEvent) -> None:
        metrics = self.state.metrics
        metrics.events.labels(kind="voice", direction="out").inc()
        if isinstance(event, ev.Error):
            metrics.errors.labels(kind="voice", code=str(event.error.get("code"))).inc()

    async def _open_model(
        self, session_id: str, name: str, config: StreamConfig
    ) -> tuple[ModelFacts, VoiceStream]:
        """Another model's stream for a session (``session.update`` with a new model)."""
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
        call_id = websocket.query_params.get("call_id")
        if call_id is not None and self.calls is not None:
            await self.calls.attach(websocket, call_id)
            return
        resume_id = websocket.query_params.get("session_id")
        if resume_id is not None:
            await self._resume(websocket, resume_id)
            return
        first: str | None = None
        if duplex.wants_duplex(websocket.query_params):
            # vllm-omni's clients open (session.update) or resume (session.resume) with their first message.
            try:
                first = await first_text(websocket, wire_errors.INVALID_EVENT)
            except RemoteProtocolError as error:
                await self._send_error(websocket, error)
                await websocket.close(1008)
                return
            except WebSocketDisconnect:
                return
            if duplex.first_type(first) == "session.resume":
                await self._resume_duplex(websocket, first)
                return
        requested = websocket.query_params.get("model") or self.default_model
        try:
            name, model = await self.admit(requested)
        except RemoteProtocolError as error:
            await self._send_error(websocket, error)
            await websocket.close(1008 if error.code == wire_errors.MODEL_NOT_FOUND.code else 1013)
            return
        session_id = "sess_" + secrets.token_hex(8)
        released = asyncio.Event()
        with bind_session(session_id):
            # The session is a task of the service, not of this handler: when the socket goes,
            # the handler returns (so a server shutdown never waits for a parked session) and
            # the session waits for a resume on its own.
            log_event(logger, "voice.model_resolved", requested=requested, model=name)
            # ?intent=transcription opens a transcription session (audio in, transcripts out).
            kind = "transcription" if websocket.query_params.get("intent") == "transcription" else "realtime"
            owner = asyncio.create_task(
                self._serve(websocket, released, session_id, name, model, first, kind)
            )
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
        await self._hand_over(websocket, Handoff(websocket, event.last_event_seq, event.event_id), event)

    async def _resume_duplex(self, websocket: WebSocket, first: str) -> None:
        """A duplex client's resume: ``session.resume`` as the first message, vllm-omni's codes."""
        try:
            request = duplex.parse_resume(first)
        except RemoteProtocolError as error:
            await self._send_error(websocket, error)
            await websocket.close(1008)
            return
        handoff = Handoff(websocket, request.last_seq, request.event_id, duplex=True)
        await self._hand_over(websocket, handoff, request)

    async def _hand_over(self, websocket: WebSocket, handoff: Handoff, request: Any) -> None:
        """Claim the session's token (single use: a second resume with it is refused) and post
        the handoff to the session's owner; return when the owner is done with the socket."""
        session_id = request.session_id
        live = self.live.get(session_id)
        if live is None or not live.credential.claim(request.resume_token):
            error = wire_errors.SESSION_NOT_FOUND if live is None else wire_errors.INVALID_RESUME_TOKEN
            error = duplex.RESUME_ERRORS[error.code] if handoff.duplex else error
            await self._refuse(websocket, error, 1008, detail="no live session with that id")
            return
        await live.handoffs.put(handoff)
        with bind_session(session_id):
            await handoff.released.wait()

    async def _serve(
        self,
        websocket: WebSocket,
        released: asyncio.Event,
        session_id: str,
        name: str,
        model: VoiceModel,
        first: str | None,
        session_type: str = "realtime",
    ) -> None:
        metrics = self.state.metrics
        events_in = metrics.events.labels(kind="voice", direction="in")
        beta = wants_beta(dict(websocket.headers), offered_subprotocols(websocket.scope))
        dialect = None
        if first is not None:
            dialect = duplex.DuplexDialect(hold_created=duplex.first_type(first) == "session.update")
        attachment = Attachment(websocket.send_text, stamp_seq=dialect is not None)
        live: Resumable | None = None

        def outgoing(event: ev.ServerEvent) -> ev.ServerEvent | None:
            if dialect is not None and (event := dialect.outbound(event)) is None:  # type: ignore[assignment]
                return None
            if isinstance(event, ev.SessionCreated) and live is not None:
                event = msgspec.structs.replace(event, resume_token=live.credential.token)
            return to_beta(event) if beta else event

        try:
            runner = await self.open_runner(
                session_id, name, model, attachment.send, outgoing, session_type=session_type
            )
        except RemoteProtocolError as error:
            await self._send_error(websocket, error)
            await websocket.close(1011)
            released.set()
            return
        session = runner.session
        live = Resumable(runner, attachment, duplex=dialect)
        undo = self.enlist(runner)
        self.live[session_id] = live
        kind = "duplex" if dialect is not None else "beta" if beta else "ga"
        log_event(logger, "voice.session_opened", model=name, dialect=kind)
        run = asyncio.create_task(runner.run())
        if (bound := self.client_secrets.bound_update(presented_key(websocket.scope))) is not None:
            await runner.put_client(bound)  # the configuration the client's ephemeral key was made with
        if first is not None:
            await self._deliver(first, live)
        socket: WebSocket | None = websocket
        socket_released: asyncio.Event | None = released
        try:
            while True:
                if socket is not None:
                    outcome = await self._hold(socket, live, run, events_in)
                    if outcome is None:
                        break
                    if isinstance(outcome, Handoff):
                        # Abort the old socket's pending write at once (its peer may have stopped
                        # reading); it closes in the background, and the resume goes on meanwhile.
                        live.attachment.detach()
                        self._retire_later(socket, socket_released, REPLACED)
                    else:
                        await self._retire(socket, socket_released, 1000)
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
            undo()
            self.live.pop(session_id, None)
            self.parked.pop(session_id, None)
            self._gauge_parked()
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
        reader = asyncio.create_task(self._read(socket, live, counter))
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
        if not self._make_room(live):
            log_event(logger, "voice.session_not_parked", held_bytes=live.held_bytes())
            return None
        session_id = live.runner.session.id
        self.parked[session_id] = live
        self._gauge_parked()
        log_event(logger, "voice.session_parked", grace_s=grace, held_bytes=live.held_bytes())
        handoff = asyncio.create_task(live.handoffs.get())
        evicted = asyncio.create_task(live.evicted.wait())
        try:
            done, _ = await asyncio.wait(
                {run, handoff, evicted}, timeout=grace, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            handoff.cancel()
            evicted.cancel()
            self.parked.pop(session_id, None)
            self._gauge_parked()
        if handoff in done:
            return handoff.result()
        outcome = "expired" if not done else "evicted" if evicted in done else "ended_parked"
        log_event(logger, f"voice.session_{outcome}")
        return None

    def _make_room(self, live: Resumable) -> bool:
        """Whether ``live`` may park: the oldest parked sessions are ended until it fits in the
        parked budget (count and bytes); one bigger than the whole byte budget does not park."""
        config = self.state.config
        size = live.held_bytes()
        if config.max_parked_sessions <= 0 or size > config.max_parked_bytes:
            return False
        total = self.parked_bytes()
        for oldest in list(self.parked.values()):
            if len(self.parked) < config.max_parked_sessions and total + size <= config.max_parked_bytes:
                break
            total -= oldest.held_bytes()
            del self.parked[oldest.runner.session.id]
            oldest.evicted.set()
        return True

    def _gauge_parked(self) -> None:
        metrics = self.state.metrics
        metrics.sessions_parked.labels(kind="voice").set(len(self.parked))
        metrics.parked_bytes.labels(kind="voice").set(self.parked_bytes())

    def _retire_later(self, socket: WebSocket, released: asyncio.Event | None, code: int) -> None:
        """Close a replaced socket without waiting for it (bounded: its peer may never read)."""

        async def retire() -> None:
            try:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(socket.close(code), RETIRE_TIMEOUT_S)
            finally:
                if released is not None:
                    released.set()

        task = asyncio.create_task(retire())
        self.owners.add(task)
        task.add_done_callback(self.owners.discard)

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
        if handoff.duplex:
            session = live.runner.session.config.to_wire(session_id)
            resumed = {"type": "session.resumed", "session_id": session_id, "session": session}
            greeting = wire.encode({**resumed, "resume_token": token}).decode()
        else:
            greeting = resumed_event(session_id, token, handoff.last_seq, live.attachment.seq)
        try:
            replayed = await live.attachment.attach(handoff.websocket.send_text, handoff.last_seq, greeting)
        except (JournalGap, ValueError) as exc:
            live.credential.give_back()
            with contextlib.suppress(Exception):
                await self._refuse_replay(handoff, exc, session_id)
            return False
        except Exception:  # the new socket died during the replay: parked again, events kept
            live.attachment.detach()
            live.credential.give_back()
            return False
        live.credential.settle(token)
        log_event(logger, "voice.session_resumed", last_seq=handoff.last_seq, replayed=replayed)
        return True

    async def _refuse_replay(self, handoff: Handoff, exc: Exception, session_id: str) -> None:
        if handoff.duplex and isinstance(exc, JournalGap):
            await handoff.websocket.send_text(wire.encode(duplex.resync_required(session_id)).decode())
            return
        if handoff.duplex:  # a seq never sent: the gap went to resync_required above
            error = wire_errors.SESSION_RESUME_CONFLICT.error(detail=exc, event_id=handoff.event_id)
        else:
            kind = wire_errors.RESUME_GAP if isinstance(exc, JournalGap) else wire_errors.INVALID_VALUE
            error = kind.error(detail=exc, param="last_event_seq", event_id=handoff.event_id)
        await self._send_error(handoff.websocket, error)

    async def _read(self, websocket: WebSocket, live: Resumable, counter: Any) -> int:
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
                text = wire.text_of(message)
            except RemoteProtocolError as error:
                await live.runner.put_client(error)
            else:
                await self._deliver(text, live)

    async def _deliver(self, text: str, live: Resumable) -> None:
        """One client text message to the runner, through the session's dialect."""
        runner = live.runner
        try:
            if live.duplex is None:
                await runner.put_client(wire.decode(text))
                return
            inbound = live.duplex.inbound(text)
        except RemoteProtocolError as error:
            await runner.put_client(error)
            return
        if isinstance(inbound, duplex.EventAck):
            try:
                live.attachment.acknowledge(inbound.seq)
            except ValueError as exc:
                refusal = wire_errors.INVALID_EVENT_ACK.error(detail=str(exc), event_id=inbound.event_id)
                await runner.put_client(refusal)
        elif isinstance(inbound, list):
            for event in inbound:
                await runner.put_client(event)
