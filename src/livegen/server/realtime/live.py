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

``POST /v1/live/sessions`` (``client.live.create``, with aiortc installed) is
the same session over WebRTC: a JSON body with the ``session`` (GPT-Live's
media configuration: no audio format, the track negotiates it) and the
``transport`` (``{"type": "webrtc", "sdp": offer}``), answered with the
session's id and the SDP answer. The call is ``server/webrtc/peer.py``'s, made,
limited, served and let go as a ``/v1/realtime/calls`` call (the audio on its
track, the events on its ``oai-events`` channel); only its link is GPT-Live's,
so ``session.started`` comes on the channel. Refusals are that route's: HTTP,
in OpenAI's error shape.

``WS /v1/live/sessions/{id}/attach`` is such a session's sideband (the SDK's
``client.live.sideband.connect``): a trusted backend, with the server's key
(the auth middleware takes no ephemeral key here), watches every event of the
session's channel and sends GPT-Live events of its own, as a socket attached to
a ``/v1/realtime/calls`` call does (``CallService.attach``, reused).

``POST /v1/live/sessions/{id}/hangup`` (``client.live.sessions.hangup``) ends a
session of either transport: its link (``Hangable``) then reads
``session.close`` as if the client had sent it, so the session ends by the
client's own path and its one ``session.closed`` (``close_requested``, OpenAI's
reason for a hangup) is sent once, whoever asks first. The SDK's other session
routes (``accept``, ``reject``, ``refer``: SIP calls; ``fork``;
``download_recording``) are answered ``unsupported_operation`` (400, OpenAI's
error shape; a fork socket: that error, then a close), never a bare 404.

Both transports' links are ``ServedLink``s: they tell the session's usage
meter (``protocol/live/usage.py``) the time and each response's token counts
before the usage is reported.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hmac
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from livegen.errors import RemoteProtocolError
from livegen.protocol import errors as wire_errors
from livegen.protocol.errors import WireError
from livegen.protocol.live import events as live
from livegen.protocol.live.dialect import LiveDialect, Step
from livegen.protocol.live.usage import Meter
from livegen.runtime.voice.lifecycle import Handoff, Link, Opening
from livegen.runtime.voice.live import LiveLink
from livegen.runtime.voice.lockstep_voice import LockstepVoice
from livegen.server.http.auth import EPHEMERAL_PREFIX, presented_key, select_subprotocol
from livegen.server.http.bodies import json_object
from livegen.server.realtime.host import VoiceHost, WebSocketLink, new_session_id
from livegen.server.realtime.resume import first_text

if TYPE_CHECKING:
    from livegen.server.webrtc.peer import CallService

PATH = "/v1/live/sessions"
#: OpenAI's GPT-Live model names: each means the served voice model.
LIVE_MODELS = "gpt-live*"
#: How a response's end starts on the wire (the tag is encoded first).
RESPONSE_DONE = '"type":"response.done"'
#: What a hung-up session reads next, as if its client had sent it.
HANGUP_CLOSE = json.dumps({"type": "session.close"})
UNSUPPORTED_OPERATION = WireError(
    "unsupported_operation",
    "{route} is not served here: {detail}",
    "livegen",
    "a GPT-Live session route livegen does not serve (accept, reject, refer, fork, download_recording)",
)
#: The SDK's session routes livegen does not serve, and why (``unsupported_operation``).
UNSERVED_ROUTES = {
    ("POST", "accept"): "livegen has no telephone line: there is no incoming SIP call to accept",
    ("POST", "reject"): "livegen has no telephone line: there is no incoming SIP call to reject",
    ("POST", "refer"): "livegen has no telephone line: there is no SIP call to transfer",
    ("POST", "fork"): "sessions are not stored once they end, so none can be forked",
    ("GET", "content"): "sessions are not recorded, so there is no recording to download",
}


class ServedLink(LiveLink):
    """``LiveLink`` as this route serves it: before the link reports usage (after each response,
    in ``session.closed``), the dialect is told the session's age and the response's usage."""

    def __init__(self, inner: Link, dialect: LiveDialect, start: Step, track: bool = False) -> None:
        super().__init__(inner, dialect, start, track)
        self._opened = time.monotonic()

    async def send_text(self, text: str) -> None:
        meter = self.dialect.meter
        meter.tell_time(int((time.monotonic() - self._opened) * 1000))
        if RESPONSE_DONE in text[:40]:  # once a response: most events are audio, and go straight on
            meter.measure(dict(json.loads(text).get("response") or {}))
        await super().send_text(text)


class Hangable:
    """A live session's link (``inner``) that a hangup can end: the session then reads
    ``session.close`` next, as if its client had sent it (a read under way is cut short: the
    session is ending, so what it would have read does not matter)."""

    def __init__(
        self, inner: Link, dialect: LiveDialect, key: str | None, forget: Callable[[], object]
    ) -> None:
        self.inner = inner
        self.dialect = dialect
        #: The key the session was opened with: an ``ek_`` key hangs up only its own sessions.
        self.key = key
        self._forget = forget
        self._hung_up = False
        self._said = False
        #: The task reading ``inner`` now (the link's own read task): a hangup interrupts it.
        self._reader: asyncio.Task[Any] | None = None

    def may_hang_up(self, key: str | None) -> bool:
        if key is None or not key.startswith(EPHEMERAL_PREFIX):
            return True  # the API-key middleware has already checked it is the server's
        return self.key is not None and hmac.compare_digest(key.encode(), self.key.encode())

    def hang_up(self) -> None:
        if self._hung_up or self.dialect.closed:
            return  # already ending: its one session.closed is on its way
        self._hung_up = True
        if self._reader is not None:
            self._reader.cancel()

    async def receive(self) -> Any:
        if self._hung_up and not self._said:
            self._said = True
            return HANGUP_CLOSE
        self._reader = asyncio.current_task()
        try:
            return await self.inner.receive()
        except asyncio.CancelledError:
            reader = self._reader
            if not self._hung_up or self._said or reader is None or reader.uncancel() > 0:
                raise  # not the hangup's cancellation (the session's end, the server's stop)
            self._said = True
            return HANGUP_CLOSE
        finally:
            self._reader = None

    async def send_text(self, text: str) -> None:
        await self.inner.send_text(text)

    async def close(self, code: int) -> None:
        self._forget()
        await self.inner.close(code)


class LiveHost(VoiceHost, Protocol):
    """The voice service as GPT-Live uses it: a ``VoiceHost`` with its WebRTC transport."""

    calls: CallService | None


class LiveService:
    """The GPT-Live routes, on the voice service's engine and key store."""

    def __init__(self, voice: LiveHost) -> None:
        self.voice = voice
        #: The live sessions of this process, by id, until their link closes (hangup finds them).
        self.sessions: dict[str, Hangable] = {}

    def routes(self) -> list[BaseRoute]:
        from livegen.server.webrtc.call_routes import cors

        routes: list[BaseRoute] = [
            WebSocketRoute(PATH, self.endpoint),
            Route(f"{PATH}/{{session_id}}/hangup", cors(self.hangup), methods=["POST", "OPTIONS"]),
            WebSocketRoute(f"{PATH}/{{session_id}}/fork", self.unserved_fork),
        ]
        for method, operation in UNSERVED_ROUTES:
            routes.append(Route(f"{PATH}/{{session_id}}/{operation}", self.unserved, methods=[method]))
        if self.voice.calls is not None:  # aiortc is installed: the WebRTC transport
            routes.append(Route(PATH, cors(self.create), methods=["POST", "OPTIONS"]))
            routes.append(WebSocketRoute(f"{PATH}/{{session_id}}/attach", self.attach))
        return routes

    async def endpoint(self, websocket: WebSocket) -> None:
        await websocket.accept(subprotocol=select_subprotocol(websocket.scope))
        plain = WebSocketLink(websocket)
        engine = self.voice.engine
        try:
            start = await self._start(websocket)
            name, model = await self._admit(start)
            session_id = new_session_id(self.voice.state)
            dialect, step = _dialect(session_id, start, model)
        except WebSocketDisconnect:
            return
        except RemoteProtocolError as error:
            await self._refuse(plain, error)
            return
        key = presented_key(websocket.scope)
        opening = Opening(
            Handoff(ServedLink(self._hangable(session_id, plain, dialect, key), dialect, step)),
            session_id,
            name,
            model,
            bound=self.voice.client_secrets.bound_update(key),
        )
        engine.open(opening)
        try:
            await opening.handoff.released.wait()
        finally:
            self.sessions.pop(session_id, None)

    def _hangable(self, session_id: str, inner: Link, dialect: LiveDialect, key: str | None) -> Hangable:
        """``inner`` as a session that ``hangup`` finds until its link closes."""
        link = Hangable(inner, dialect, key, lambda: self.sessions.pop(session_id, None))
        self.sessions[session_id] = link
        return link

    async def hangup(self, request: Request) -> Response:
        """``POST /v1/live/sessions/{id}/hangup``: the session ends as on ``session.close``."""
        session_id = request.path_params["session_id"]
        link = self.sessions.get(session_id)
        if link is None or not link.may_hang_up(presented_key(request.scope)):
            detail = f"no live session with id {session_id!r}"
            return _http_error(wire_errors.SESSION_NOT_FOUND.error(detail=detail, param="session_id"), 404)
        link.hang_up()
        return Response(status_code=200)

    async def unserved(self, request: Request) -> Response:
        """The SDK's session routes livegen does not serve: ``unsupported_operation``, by name."""
        operation = request.url.path.rsplit("/", 1)[1]
        why = UNSERVED_ROUTES[request.method, operation]
        route = f"{request.method} {PATH}/{{session_id}}/{operation}"
        return _http_error(UNSUPPORTED_OPERATION.error(route=route, detail=why), 400)

    async def unserved_fork(self, websocket: WebSocket) -> None:
        """``client.live.forks.connect``: the same refusal, as an ``error`` event, then a close."""
        await websocket.accept(subprotocol=select_subprotocol(websocket.scope))
        route = f"WS {PATH}/{{session_id}}/fork"
        error = UNSUPPORTED_OPERATION.error(route=route, detail=UNSERVED_ROUTES["POST", "fork"])
        await self._refuse(WebSocketLink(websocket), error)

    async def _admit(self, start: live.SessionStart) -> tuple[str, Any]:
        """The served model ``session.start`` names (``gpt-live*``: the default), admitted."""
        requested = start.session.model
        if fnmatch.fnmatchcase(requested, LIVE_MODELS):
            requested = self.voice.engine.default_model
        return await self.voice.engine.admit(requested)

    async def create(self, request: Request) -> Response:
        """``POST /v1/live/sessions``: a GPT-Live session on a WebRTC call (``client.live.create``)."""
        from livegen.server.webrtc.call_routes import check_offer
        from livegen.server.webrtc.calls import CallLink
        from livegen.server.webrtc.peer import REQUIRED_LINES, let_go

        calls = self.voice.calls
        assert calls is not None  # the route exists only with the transport
        try:
            start, sdp = _media_start(json_object(await request.body()))
        except RemoteProtocolError as error:
            return calls.refuse(error)
        with calls.answering():
            try:
                check_offer(sdp, REQUIRED_LINES)
                calls.check_room()
                name, model = await self._admit(start)
                session_id = new_session_id(self.voice.state)
                dialect, step = _dialect(session_id, start, model)
            except RemoteProtocolError as error:
                return calls.refuse(error)
            key = presented_key(request.scope)
            call = await calls.negotiate(sdp, key)
            if isinstance(call, Response):
                return call
            call.live_session = session_id  # the channel speaks GPT-Live: the link decodes it
            hangable = self._hangable(session_id, CallLink(call), dialect, key)
            dialect.meter.breakdown = True
            link = ServedLink(hangable, dialect, step, track=True)
            bound = self.voice.client_secrets.bound_update(key)
            refused = await calls.open_on(call, link, session_id, name, model, bound)
            if refused is not None:
                self.sessions.pop(session_id, None)
                await let_go(call, "refused")
                return calls.refuse(refused)
            calls.go_live(call, session_id, name)
        transport = {"type": "webrtc", "sdp": call.pc.localDescription.sdp}
        return JSONResponse({"session": {"id": session_id}, "transport": transport}, status_code=201)

    async def attach(self, websocket: WebSocket) -> None:
        """The sideband: a backend on a WebRTC session's call (none: ``call_not_found``, a close)."""
        from livegen.server.webrtc.call_routes import CALL_NOT_FOUND

        await websocket.accept(subprotocol=select_subprotocol(websocket.scope))
        session_id = websocket.path_params["session_id"]
        calls = self.voice.calls
        assert calls is not None  # the route exists only with the transport
        found = [c for c in calls.calls.values() if c.live_session == session_id]
        if not found:
            error = CALL_NOT_FOUND.error(call_id=session_id, param="session_id")
            await self._refuse(WebSocketLink(websocket), error)
            return
        await calls.attach(websocket, found[0].id)

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


def _http_error(error: RemoteProtocolError, status: int) -> Response:
    """OpenAI's HTTP error, exactly: ``{"error": {type, code, message, param}}``."""
    body = {k: v for k, v in error.to_error_body().items() if k in ("type", "code", "message", "param")}
    return JSONResponse({"error": body}, status_code=status)


def _dialect(session_id: str, start: live.SessionStart, model: Any) -> tuple[LiveDialect, Step]:
    """The session's dialect, started (raises what the model cannot honour, by name)."""
    # A cascade answering with a language model (remote or embedded) can delegate by a tool call.
    llm = getattr(model, "llm", None)
    dialect = LiveDialect(
        session_id,
        native=isinstance(model, LockstepVoice),
        delegates=llm is not None,
        meter=Meter(context_tokens=getattr(llm, "context_tokens", None)),
    )
    return dialect, dialect.start(start, int(time.time()))


#: What GPT-Live's media configuration has that a session here cannot honour (refused by name).
MEDIA_UNSERVED = {
    "idle_timeout_s": "inference is never paused: a session runs until it ends",
    "wake_policy": "inference is never paused, so there is nothing to wake",
}


def _media_start(body: dict[str, Any]) -> tuple[live.SessionStart, str]:
    """``client.live.create``'s body: its ``session`` as a checked ``session.start``, and the offer."""
    for name in body:
        if name not in ("session", "transport"):
            raise wire_errors.UNKNOWN_PARAMETER.error(name=name, param=name)
    transport, session = body.get("transport"), body.get("session")
    for name, part in (("session", session), ("transport", transport)):
        if not isinstance(part, dict):
            raise wire_errors.MISSING_REQUIRED_PARAMETER.error(name=name, param=name)
    assert isinstance(transport, dict) and isinstance(session, dict)
    if transport.get("type") != "webrtc" or not isinstance(transport.get("sdp"), str):
        detail = "transport must be {'type': 'webrtc', 'sdp': <the SDP offer>}"
        raise wire_errors.INVALID_VALUE.error(detail=detail, param="transport")
    for name, why in MEDIA_UNSERVED.items():
        if name in session:
            param = f"session.{name}"
            raise wire_errors.LIVE_UNSUPPORTED.error(name=param, detail=why, param=param)
    if "format" in (session.get("audio") or {}):  # WebRTC negotiates it on the track
        raise wire_errors.UNKNOWN_PARAMETER.error(name="session.audio.format", param="session.audio.format")
    start = live.decode(json.dumps({"type": "session.start", "session": session}))
    assert isinstance(start, live.SessionStart)
    return start, str(transport["sdp"])
