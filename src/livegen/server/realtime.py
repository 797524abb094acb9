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

from livegen.errors import ConfigError, InvalidRequest, RemoteProtocolError
from livegen.logs import bind_session, log_event
from livegen.models import Kind
from livegen.models.voice import StreamConfig, VoiceModel, VoiceStream
from livegen.protocol import realtime as wire
from livegen.protocol.beta import to_beta, wants_beta
from livegen.runtime.voice import Runner
from livegen.server.auth import offered_subprotocols, select_subprotocol
from livegen.voice.session import Limits, ModelFacts, Session

if TYPE_CHECKING:
    from livegen.server.app import State

logger = logging.getLogger("livegen.server.realtime")


class RealtimeService:
    name = "voice"

    def __init__(self, state: State, limits: Limits | None = None) -> None:
        self.state = state
        self.limits = limits or Limits()
        assert state.voice_model is not None
        self.default_model = state.voice_model.name
        self.models: dict[str, VoiceModel] = {}
        self.runners: set[Runner] = set()
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

    def health(self) -> dict[str, Any]:
        return {
            "ready": self.default_model in self.models,
            "model": self.default_model,
            "sessions": len(self.runners),
        }

    def _canonical_name(self, name: str) -> str:
        """The registered name for an alias (``gpt-realtime`` -> ``cascade``); unknown names pass."""
        try:
            return self.state.registry.get(name).name
        except ConfigError:
            return name

    async def _model(self, name: str) -> VoiceModel:
        entry = self.state.registry.get(name)
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

    async def _refuse(self, websocket: WebSocket, code: str, message: str, close_code: int) -> None:
        self.state.metrics.errors.labels(kind="voice", code=code).inc()
        error = {
            "type": "invalid_request_error",
            "code": code,
            "message": message,
            "param": None,
            "event_id": None,
        }
        await websocket.send_text(
            wire.encode({"type": "error", "event_id": "event_refused", "error": error}).decode()
        )
        await websocket.close(close_code)

    async def endpoint(self, websocket: WebSocket) -> None:
        await websocket.accept(subprotocol=select_subprotocol(websocket.scope))
        requested = websocket.query_params.get("model") or self.default_model
        if self.default_model not in self.models:
            await self._refuse(
                websocket, "model_not_ready", "the voice model is still loading; retry shortly", 1013
            )
            return
        try:
            name = self._canonical_name(requested)
            model = await self._model(name)
        except ConfigError as exc:
            await self._refuse(websocket, "model_not_found", str(exc), 1008)
            return
        if len(self.runners) >= self.state.config.max_sessions:
            limit = self.state.config.max_sessions
            await self._refuse(
                websocket, "too_many_sessions", f"the server holds {limit} voice sessions", 1013
            )
            return
        session_id = "sess_" + secrets.token_hex(8)
        with bind_session(session_id):
            await self._serve(websocket, session_id, name, model)

    async def _serve(self, websocket: WebSocket, session_id: str, name: str, model: VoiceModel) -> None:
        counter = itertools.count(1)
        tag = session_id[5:13]

        def ids(prefix: str) -> str:
            return f"{prefix}_{tag}{next(counter):x}"

        facts = ModelFacts(name, model.input_rate, model.output_rate, model.has_vad)
        session = Session(session_id, facts, ids, self.limits, canonical_name=self._canonical_name)
        metrics = self.state.metrics
        try:
            stream = await model.open(session_id, session.config.stream_config())
        except Exception as exc:  # one model failing to open a stream fails this session only
            log_event(logger, "voice.open_failed", logging.ERROR, error=str(exc))
            await self._refuse(
                websocket, "model_error", f"the voice model could not open a stream: {exc}", 1011
            )
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
            except ConfigError as exc:
                raise InvalidRequest(str(exc), code="model_not_found", param="session.model") from None
            try:
                stream = await model.open(session_id, config)
            except Exception as exc:
                message = f"the voice model {name!r} could not open a stream: {exc}"
                raise InvalidRequest(message, code="model_error", param="session.model") from exc
            return ModelFacts(name, model.input_rate, model.output_rate, model.has_vad), stream

        beta = wants_beta(dict(websocket.headers), offered_subprotocols(websocket.scope))
        runner = Runner(
            session,
            stream,
            websocket.send_text,
            on_sent=on_sent,
            open_model=open_model,
            dialect=to_beta if beta else None,
        )
        self.runners.add(runner)
        metrics.sessions_open.labels(kind="voice").inc()
        metrics.sessions_total.labels(kind="voice").inc()
        log_event(logger, "voice.session_opened", model=name, dialect="beta" if beta else "ga")
        run = asyncio.create_task(runner.run())
        reader = asyncio.create_task(self._read(websocket, runner, events_in))
        try:
            await asyncio.wait({reader, run}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            reader.cancel()
            await runner.stop("client_disconnected")
            with contextlib.suppress(Exception):
                await run
            self.runners.discard(runner)
            metrics.sessions_open.labels(kind="voice").dec()
            with contextlib.suppress(Exception):
                await websocket.close()
            log_event(logger, "voice.session_closed", stale_outputs=session.num_stale_outputs)

    async def _read(self, websocket: WebSocket, runner: Runner, counter: Any) -> None:
        with contextlib.suppress(WebSocketDisconnect):
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                counter.inc()
                text = message.get("text")
                try:
                    if text is None:
                        raise InvalidRequest(
                            "binary messages are not part of this protocol; send JSON text",
                            code="invalid_event",
                        )
                    event: wire.ClientEvent | RemoteProtocolError = wire.decode(text)
                except RemoteProtocolError as error:
                    event = error
                await runner.put_client(event)
