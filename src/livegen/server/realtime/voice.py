"""``/v1/realtime``: the WebSocket transport of voice sessions (the OpenAI Realtime protocol).

The route accepts a socket and hands it to the ``VoiceEngine``
(``runtime/voice/engine.py``), which owns the sessions: their models,
admission, and resume (attached -> parked -> attached or ended). This module
only moves bytes: it reads what a connection asks for (a new session, with
``?model=`` or the configured default; a resume, ``?session_id=``; a WebRTC
call to watch, ``?call_id=``), turns each frame into text (a frame that is not
text is answered on the same socket, and the session goes on) and writes what
the engine sends. Refusals before a session exists (unknown model, not ready,
too many sessions) are an ``error`` event followed by a close, so an SDK sees
OpenAI's error shape.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from starlette.routing import BaseRoute, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from livegen.cluster.forward import forward_accepted
from livegen.errors import RemoteProtocolError
from livegen.logs import bind_session, log_event
from livegen.models.registry import OPENAI_REALTIME_PATTERNS, ServedNames
from livegen.protocol import errors as wire_errors
from livegen.protocol.realtime import duplex
from livegen.protocol.realtime.beta import wants_beta
from livegen.runtime.voice.engine import VoiceEngine, logger
from livegen.runtime.voice.lifecycle import Handoff, Opening
from livegen.server.http.auth import offered_subprotocols, presented_key, select_subprotocol
from livegen.server.http.client_secrets import ClientSecrets
from livegen.server.http.client_secrets import routes_for as client_secrets_routes
from livegen.server.realtime.host import WebSocketLink, new_session_id
from livegen.server.realtime.resume import first_text, read_resume

if TYPE_CHECKING:
    from livegen.server.state import State
    from livegen.server.webrtc.peer import CallService


class VoiceService:
    name = "voice"

    def __init__(self, state: State) -> None:
        self.state = state
        assert state.voice_model is not None
        config = state.config
        patterns = OPENAI_REALTIME_PATTERNS + tuple(config.model_aliases)
        names = ServedNames(
            state.registry, state.voice_model.name, tuple(config.served_model_names), patterns
        )
        self.engine = VoiceEngine(
            state.registry, names, config, state.metrics, shared=state.model_services.voice
        )
        #: Ephemeral client keys (``/v1/realtime/client_secrets``), shared with the auth middleware.
        self.client_secrets: ClientSecrets = state.client_secrets
        #: The WebRTC transport (``server/webrtc/peer.py``), when aiortc is installed (the ``webrtc`` extra).
        self.calls: CallService | None = None
        with contextlib.suppress(ImportError):
            import aiortc  # noqa: F401

            from livegen.server.webrtc.peer import CallService

            self.calls = CallService(self)

    def routes(self) -> list[BaseRoute]:
        routes: list[BaseRoute] = [WebSocketRoute("/v1/realtime", self.endpoint)]
        routes += client_secrets_routes(self.client_secrets, lambda: self.engine.default_model)
        from livegen.server.realtime.translation import TranslationService  # its routes refer back to these

        routes += TranslationService(self).routes()
        from livegen.server.realtime.live import LiveService  # GPT-Live (/v1/live/sessions), on this engine

        routes += LiveService(self).routes()
        if self.calls is not None:
            routes += self.calls.routes()
        return routes

    async def start(self) -> None:
        await self.engine.start()

    async def stop(self) -> None:
        if self.calls is not None:
            await self.calls.stop()
        await self.engine.stop()

    def health(self) -> dict[str, Any]:
        return self.engine.health()

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
        link = WebSocketLink(websocket)
        first: str | None = None
        if duplex.wants_duplex(websocket.query_params):
            # vllm-omni's clients open (session.update) or resume (session.resume) with their first message.
            try:
                first = await first_text(websocket, wire_errors.INVALID_EVENT)
            except RemoteProtocolError as error:
                await self.engine.refuse(link, error, 1008)
                return
            except WebSocketDisconnect:
                return
            if duplex.first_type(first) == "session.resume":
                await self._resume_duplex(link, first)
                return
        await self._open(link, first)

    async def _open(self, link: WebSocketLink, first: str | None) -> None:
        """A new session: admitted by the engine, which owns it from here; wait until it lets go."""
        websocket = link.websocket
        requested = websocket.query_params.get("model") or self.engine.default_model
        try:
            name, model = await self.engine.admit(requested)
        except RemoteProtocolError as error:
            close_code = 1008 if error.code == wire_errors.MODEL_NOT_FOUND.code else 1013
            await self.engine.refuse(link, error, close_code)
            return
        session_id = new_session_id(self.state)
        with bind_session(session_id):
            log_event(logger, "voice.model_resolved", requested=requested, model=name)
        # ?intent=transcription opens a transcription session (audio in, transcripts out).
        is_transcription = websocket.query_params.get("intent") == "transcription"
        opening = Opening(
            Handoff(link),
            session_id,
            name,
            model,
            session_type="transcription" if is_transcription else "realtime",
            beta=wants_beta(dict(websocket.headers), offered_subprotocols(websocket.scope)),
            first=first,
            bound=self.client_secrets.bound_update(presented_key(websocket.scope)),
        )
        self.engine.open(opening)
        await opening.handoff.released.wait()

    async def _resume(self, websocket: WebSocket, session_id: str) -> None:
        """A connection re-attaching to a live session: check it, then hand it to the engine."""
        link = WebSocketLink(websocket)
        try:
            event = await read_resume(websocket, session_id)
        except RemoteProtocolError as error:
            await self.engine.refuse(link, error, 1008)
            return
        except WebSocketDisconnect:
            return
        handoff = Handoff(link, event.last_event_seq, event.event_id)
        await self.engine.hand_over(handoff, event.session_id, event.resume_token)

    async def _resume_duplex(self, link: WebSocketLink, first: str) -> None:
        """A duplex client's resume: ``session.resume`` as the first message, vllm-omni's codes."""
        try:
            request = duplex.parse_resume(first)
        except RemoteProtocolError as error:
            await self.engine.refuse(link, error, 1008)
            return
        if await self._relay_duplex(link, request.session_id, first):
            return
        handoff = Handoff(link, request.last_seq, request.event_id, duplex=True)
        await self.engine.hand_over(handoff, request.session_id, request.resume_token)

    async def _relay_duplex(self, link: WebSocketLink, session_id: str, first: str) -> bool:
        """A duplex resume of a session another process of the cluster owns goes to that process,
        as a ``?session_id=`` resume does through the gate (which cannot see this id: it is in the
        first message). False: answered here (this process's own, or an owner gone: unknown)."""
        member = self.state.gate.member
        if member is None or member.owns(session_id):
            return False
        address = await member.address_of(session_id)
        socket = link.websocket
        return address is not None and await forward_accepted(
            socket.scope, socket.receive, socket.send, address, first
        )
