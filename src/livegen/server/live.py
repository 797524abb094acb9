"""``/v1/live/sessions``: OpenAI's GPT-Live API over WebSocket, served by the voice engine.

The SDK's ``client.live.connect()`` (and pipecat's and LiveKit's GPT-Live
services) open the socket with no query and send ``session.start`` first, with
the model in it. This route reads that message, checks it (strictly: an
unknown field is OpenAI's ``unknown_parameter``), admits the session on the
voice engine exactly as ``/v1/realtime`` does (keys, ephemeral or not, Origin
checks, limits and budgets are the same middleware's; the model resolves as
there, a ``gpt-live*`` name meaning the served default), and hands the engine a
``LiveLink`` (``runtime/voice/live.py``): from there it is an ordinary voice
session, with every voice model. A refusal before the session exists is an
``error`` event in GPT-Live's shape, then a close.
"""

from __future__ import annotations

import fnmatch
import time
from typing import TYPE_CHECKING

from starlette.routing import BaseRoute, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from livegen.errors import RemoteProtocolError
from livegen.protocol import errors as wire_errors
from livegen.protocol.live import events as live
from livegen.protocol.live.dialect import LiveDialect
from livegen.runtime.voice.lifecycle import Handoff, Opening
from livegen.runtime.voice.live import LiveLink
from livegen.runtime.voice.lockstep_voice import LockstepVoice
from livegen.server.auth import presented_key, select_subprotocol
from livegen.server.resume import first_text

if TYPE_CHECKING:
    from livegen.server.voice import VoiceService, WebSocketLink

PATH = "/v1/live/sessions"
#: OpenAI's GPT-Live model names: each means the served voice model.
LIVE_MODELS = "gpt-live*"


class LiveService:
    """The GPT-Live routes, on the voice service's engine and key store."""

    def __init__(self, voice: VoiceService) -> None:
        self.voice = voice

    def routes(self) -> list[BaseRoute]:
        return [WebSocketRoute(PATH, self.endpoint)]

    async def endpoint(self, websocket: WebSocket) -> None:
        from livegen.server.voice import WebSocketLink, new_session_id

        await websocket.accept(subprotocol=select_subprotocol(websocket.scope))
        plain = WebSocketLink(websocket)
        engine = self.voice.engine
        try:
            start = await self._start(websocket)
            requested = start.session.model
            if fnmatch.fnmatchcase(requested, LIVE_MODELS):
                requested = engine.default_model
            name, model = await engine.admit(requested)
        except WebSocketDisconnect:
            return
        except RemoteProtocolError as error:
            await self._refuse(plain, error)
            return
        session_id = new_session_id(self.voice.state)
        # A cascade answering with a language model (remote or embedded) can delegate by a tool call.
        delegates = getattr(model, "llm", None) is not None
        dialect = LiveDialect(session_id, native=isinstance(model, LockstepVoice), delegates=delegates)
        try:
            step = dialect.start(start, int(time.time()))
        except RemoteProtocolError as error:
            await self._refuse(plain, error)
            return
        opening = Opening(
            Handoff(LiveLink(plain, dialect, step)),
            session_id,
            name,
            model,
            bound=self.voice.client_secrets.bound_update(presented_key(websocket.scope)),
        )
        engine.open(opening)
        await opening.handoff.released.wait()

    async def _start(self, websocket: WebSocket) -> live.SessionStart:
        text = await first_text(websocket, wire_errors.INVALID_EVENT)
        event = live.decode(text)
        if not isinstance(event, live.SessionStart):
            raise wire_errors.LIVE_NOT_STARTED.error(event_id=event.event_id)
        return event

    async def _refuse(self, link: WebSocketLink, error: RemoteProtocolError) -> None:
        """GPT-Live's ``error`` event outside any session, counted, then a close."""
        self.voice.engine.metrics.errors.labels(kind="voice", code=error.code).inc()
        await link.send_text(live.encode(live.error_event(error, "event_refused")))
        code = (
            1013
            if error.code in (wire_errors.TOO_MANY_SESSIONS.code, wire_errors.MODEL_NOT_READY.code)
            else 1008
        )
        await link.close(code)
