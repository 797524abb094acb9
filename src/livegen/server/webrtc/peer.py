"""``/v1/realtime/calls``: voice sessions over WebRTC (aiortc), as OpenAI's browser clients connect.

One engine, two transports: a call is a session of the ``VoiceEngine``,
admitted, opened, run and ended by the same per-session owner as a socket's
(``runtime/voice/owner.py``, by the table in ``voice/lifecycle.py``); the call
is the session's link (``calls.CallLink``). This module only moves media and
text:

- the caller's Opus audio (one ``sendrecv`` audio track) is decoded by aiortc,
  resampled to 24 kHz PCM16 and fed to the runner as ``input_audio_buffer.append``
  events, so turn detection, transcription and answers are the WebSocket's;
- the data channel ``oai-events`` carries the same JSON client and server events;
- the answer's audio goes on the track, not on the channel: the runner's
  ``response.output_audio.delta`` events are taken off the wire by this
  transport's dialect and queued on the track (``AnswerTrack``), which sends
  20 ms frames at real time; ``output_audio_buffer.started`` / ``.stopped`` /
  ``.cleared`` say when it plays. A cancelled response (barge-in,
  ``response.cancel``, ``output_audio_buffer.clear``) empties the track's queue
  at once. The track reports what it actually sent as ``playback.ack``, so the
  session's playback ledger, and the truncation of an interrupted answer, are
  what went out on the track.

A call ends on ``POST /v1/realtime/calls/{id}/hangup``, on ``session.close``,
or when nothing (no media, no data-channel message) has come for
``NO_MEDIA_TIMEOUT_S`` (the caller is told ``session.closed``). When the peer's
connection fails or closes, the call is freed and its session parks for a
resume, as a lost socket's (``calls.Call.close_code``). A new call takes it
back (a page that reloaded): ``POST /v1/realtime/calls?session_id=`` with the
``session.resume`` a socket would send first as the offer's ``resume`` part;
the token is checked before the media is negotiated, claimed and posted to the
session's owner in one step after, and the owner's greeting and replay go on
the new channel (``CallService._resume``). A socket may take it back too.

A server-side WebSocket may attach to a live call with ``/v1/realtime?call_id=``
to watch its events and send its own (a backend running tools for a browser).
Hangup and attach take the server's key or the call's own ephemeral key. What
happens inside a live call (the answer track, the channel's writer and its
limits, attached sockets, its link) is ``server/webrtc/calls.py``; what both call
routes share (the calls, hangup, the limit, offers, CORS, task sets) is
``server/webrtc/call_routes.py``; this module sets calls up, listens to the caller and
lets calls go.

ICE: aiortc gathers host candidates, enough on loopback and a LAN; behind NAT
give ``--webrtc-ice-servers`` (STUN/TURN URLs) so it gathers reflexive/relay ones.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.websockets import WebSocket, WebSocketDisconnect

from livegen.errors import RemoteProtocolError
from livegen.logs import bind_session, log_event
from livegen.protocol import errors as wire_errors
from livegen.protocol import realtime as wire
from livegen.protocol.realtime import server as ev
from livegen.runtime.closes import CLOSE_NOT_READING, NOT_READING_REASON
from livegen.runtime.voice.engine import configured_session
from livegen.runtime.voice.lifecycle import Handoff, Link, Opening
from livegen.server.http.auth import EPHEMERAL_PREFIX, presented_key
from livegen.server.http.client_secrets import error_response, validated_session
from livegen.server.realtime.resume import checked_resume
from livegen.server.webrtc.call_routes import (
    CALL_NOT_FOUND,
    INVALID_OFFER,
    NEGOTIABLE_LINES,
    STATUS,
    CallRoutes,
    Offer,
    check_offer,
    follow_peer,
    read_offer,
    when_open,
)
from livegen.server.webrtc.calls import (
    RATE,
    SESSION_TOO_LARGE,
    Call,
    CallLink,
    Watcher,
    max_message_bytes,
)
from livegen.tasks import TaskSet

if TYPE_CHECKING:
    from livegen.server.realtime.host import VoiceHost

logger = logging.getLogger("livegen.server.webrtc")

#: Caller audio is fed to the session in pieces this long (a trade of events against latency).
APPEND_MS = 20
#: Complete Opus frames the server's jitter buffer holds before decoding (aiortc's default: 4).
JITTER_PREFETCH = 1
#: A call whose caller has not been heard for this long (no media, no data-channel message) ends.
NO_MEDIA_TIMEOUT_S = 5.0


class CallService(CallRoutes[Call]):
    """The WebRTC transport of ``VoiceService``: call setup, the calls, attaching (``CallRoutes``:
    hangup, the limit, refusals, shutdown)."""

    path = "/v1/realtime/calls"
    kind = "voice"
    refused_event = "webrtc.call_refused"

    def __init__(self, voice: VoiceHost) -> None:
        super().__init__(voice.state)
        self.voice = voice
        self.engine = voice.engine

    async def create(self, request: Request) -> Response:
        try:
            offer = await read_offer(request)  # read before a slot is taken: a slow body holds none
        except RemoteProtocolError as error:
            return self.refuse(error)
        with self.answering():
            resume_id = request.query_params.get("session_id")
            if resume_id is not None or offer.resume is not None:
                return await self._resume(request, offer, resume_id)
            return await self._create(request, offer.sdp, offer.session)

    async def _create(self, request: Request, sdp: str, session: dict[str, Any] | None) -> Response:
        try:
            check_offer(sdp, REQUIRED_LINES)
            self.check_room()
            secret = self.voice.client_secrets.lookup(presented_key(request.scope))
            bound = {**(secret.session if secret is not None else {}), **(session or {})}
            requested = bound.get("model") or request.query_params.get("model") or self.engine.default_model
            validated_session(bound, requested)
            name, model = await self.engine.admit(requested)
        except RemoteProtocolError as error:
            return self.refuse(error)
        key = presented_key(request.scope)
        return await self._answer(sdp, _track_formats(bound) if bound else bound, name, model, key)

    async def _answer(
        self, sdp: str, bound: dict[str, Any], name: str, model: Any, key: str | None
    ) -> Response:
        limit = max_message_bytes(sdp)
        try:
            too_large = _session_too_large(bound, name, limit)
        except RemoteProtocolError as invalid:  # checked already under the requested name; never here
            too_large = invalid
        if too_large is not None:
            return self.refuse(too_large)
        call = await self.negotiate(sdp, key)
        if isinstance(call, Response):
            return call
        session_id = self.voice.state.gate.new_id("sess_", 16)  # tagged: a resume finds its process
        refused = await self._open(call, session_id, name, model, bound)
        if refused is not None:
            await let_go(call, "refused")
            return error_response(refused, STATUS.get(refused.code, 400))
        return self._answered(call, session_id, model=name)

    async def _resume(self, request: Request, offer: Offer, session_id: str | None) -> Response:
        """A new call for a session that lost its link (a page reloaded): the offer carries the
        ``session.resume`` a socket would send first. The token is claimed and the call posted to
        the session's owner in one step, once the offer is negotiated; the owner's greeting
        (``session.resumed``) and replay go on the new channel, as on a resuming socket."""
        try:
            check_offer(offer.sdp, RESUME_LINES)
            self.check_room()
            if session_id is None or offer.resume is None:
                raise wire_errors.INVALID_RESUME.error(detail=RESUME_PARTS)
            if offer.session is not None:
                raise wire_errors.INVALID_RESUME.error(detail=RESUME_AS_IT_IS, param="session")
            event = checked_resume(offer.resume, session_id)
            self.engine.check_resume(session_id, event.resume_token)  # claimed once negotiated
        except RemoteProtocolError as error:
            return self.refuse(error)
        call = await self.negotiate(offer.sdp, presented_key(request.scope))
        if isinstance(call, Response):
            return call
        link = CallLink(call)
        handoff = Handoff(
            link, event.last_event_seq, event.event_id, transport=call.outgoing, formats_fixed=True
        )
        try:
            self.engine.post_resume(handoff, session_id, event.resume_token)
        except RemoteProtocolError as error:  # claimed meanwhile by another resume, or ended
            await let_go(call, "refused")
            return self.refuse(error)
        return self._answered(call, session_id)

    async def negotiate(self, sdp: str, key: str | None) -> Call | Response:
        """A call for the offer, with its answer made (or the refusal of an offer aiortc cannot
        take); it has no session yet (GPT-Live's route uses it too)."""
        from aiortc import RTCSessionDescription

        pc = self.peer_connection()
        owner = key if key is not None and key.startswith(EPHEMERAL_PREFIX) else None
        has_channel = "m=application " in sdp
        # Tagged with this process in a cluster, so that its hangup and attach reach it (gate.py).
        call = Call(self.voice.state.gate.new_id("rtc_", 32), pc, owner, max_message_bytes(sdp), has_channel)
        try:
            self._wire_peer(call)  # before the offer: aiortc announces the caller's track while applying it
            await pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
            pc.addTrack(call.answer.track)  # on the offer's audio transceiver: one track both ways
            answer = await pc.createAnswer()
            await pc.setLocalDescription(answer)
        except Exception as exc:  # aiortc rejects what it cannot negotiate; its words are its internals
            await let_go(call, "refused")
            log_event(logger, "webrtc.offer_refused", logging.WARNING, error=f"{type(exc).__name__}: {exc}")
            return self.refuse(INVALID_OFFER.error(detail=UNNEGOTIABLE, param="sdp"))
        return call

    def _answered(self, call: Call, session_id: str, model: str | None = None) -> Response:
        """The call's session has it: the call goes live, and the caller gets the SDP answer."""
        self.go_live(call, session_id, model)
        headers = {"Location": f"/v1/realtime/calls/{call.id}"}
        return Response(
            call.pc.localDescription.sdp, status_code=201, media_type="application/sdp", headers=headers
        )

    def go_live(self, call: Call, session_id: str, model: str | None) -> None:
        """The call's session has it: the call is served until it ends (GPT-Live's route too)."""
        self.calls[call.id] = call
        self.tasks.spawn(self._serve(call, session_id, model))

    async def _open(
        self, call: Call, session_id: str, name: str, model: Any, bound: dict[str, Any]
    ) -> RemoteProtocolError | None:
        update = {"type": "session.update", "session": bound}
        decoded = wire.decode(msgspec.json.encode(update)) if bound else None
        return await self.open_on(call, CallLink(call), session_id, name, model, decoded)

    async def open_on(
        self, call: Call, link: Link, session_id: str, name: str, model: Any, bound: wire.ClientEvent | None
    ) -> RemoteProtocolError | None:
        """The call's session, opened by the engine's owner (as a socket's) on ``link`` (the call's
        own, or GPT-Live's over it); returns the refusal if it could not open (the caller gets it
        as the HTTP answer)."""
        outcome: asyncio.Future[RemoteProtocolError | None] = asyncio.get_running_loop().create_future()
        opening = Opening(
            Handoff(link, transport=call.outgoing, formats_fixed=True),
            session_id,
            name,
            model,
            bound=bound,
            outcome=outcome,
        )
        self.engine.open(opening)
        await asyncio.wait({outcome})
        if outcome.cancelled():  # the owner failed before the session started (a bug, logged)
            return wire_errors.MODEL_OPEN_FAILED.error(model=name, detail="the session failed to start")
        return outcome.result()

    def _wire_peer(self, call: Call) -> None:
        """Route the peer's track, data channel and connection state into the call."""
        pc = call.pc

        listening: list[Any] = []

        @pc.on("track")
        def on_track(track: Any) -> None:
            if track.kind == "audio" and not listening:  # one caller, one voice: the first audio track
                listening.append(track)
                _shorten_jitter_buffer(pc, track)
                call.tasks.spawn(self._listen(call, track))

        @pc.on("datachannel")
        def on_datachannel(channel: Any) -> None:
            if channel.label != "oai-events":
                return

            @channel.on("message")  # type: ignore[untyped-decorator]
            def on_message(message: Any) -> None:
                call.last_heard = time.monotonic()  # a receive-only caller is alive while it talks here
                if isinstance(message, str):
                    call.receive(message if call.live_session else _decode(message))
                else:
                    call.receive(wire_errors.INVALID_EVENT.error(detail=wire.BINARY_DETAIL))

            when_open(channel, call.open_channel)

        follow_peer(pc, call.end)

    async def _listen(self, call: Call, track: Any) -> None:
        """The caller's audio: Opus frames decoded, resampled to 24 kHz, appended to the session."""
        import av

        resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
        piece = bytearray()
        size = RATE * 2 * APPEND_MS // 1000
        while not call.ended.is_set():
            try:
                frame = await track.recv()
            except Exception:  # the track ended: the peer is gone
                call.end("peer_track_ended")
                return
            call.last_heard = time.monotonic()
            for out in resampler.resample(frame):
                piece += np.asarray(out.to_ndarray(), dtype="<i2").tobytes()
            if len(piece) >= size:
                audio = base64.b64encode(bytes(piece)).decode()
                piece.clear()
                call.put_internal(wire.AudioAppend(audio=audio))

    async def _serve(self, call: Call, session_id: str, model: str | None) -> None:
        """Carry the call from answer to end: its writer and watchdog run until its session lets
        go of it (``CallLink.close``), then the call lets go of everything. ``model``: the new
        session's (None: the call resumes a session)."""
        with bind_session(session_id):
            metrics = self.voice.state.metrics

            def unsent_bytes() -> int:
                return call.queued_bytes + sum(w.unsent_bytes for w in call.watchers)

            metrics.unsent_sources.add(unsent_bytes)
            # The call's id is its capability on a server without a key: it is never logged.
            if model is None:
                log_event(logger, "webrtc.call_resumed")
            else:
                log_event(logger, "webrtc.call_opened", model=model)
            call.tasks.spawn(call.write())
            call.tasks.spawn(self._watch(call))
            try:
                await call.closed.wait()
            finally:
                self.calls.pop(call.id, None)
                for watcher in call.watchers:
                    watcher.close()
                await let_go(call, "ended")
                metrics.unsent_sources.discard(unsent_bytes)
                log_event(logger, "webrtc.call_closed", reason=call.end_reason)

    async def _watch(self, call: Call) -> None:
        """End a call whose peer has gone quiet (no ICE consent, no packets)."""
        while True:
            await asyncio.sleep(1.0)
            if time.monotonic() - call.last_heard > NO_MEDIA_TIMEOUT_S:
                call.end("peer_silent")
                return

    async def attach(self, websocket: WebSocket, call_id: str) -> None:
        """A server-side WebSocket on a live call: it sees the call's events and may send its own."""
        call = self.live_call(call_id, presented_key(websocket.scope))
        if call is None:
            error = CALL_NOT_FOUND.error(call_id=call_id, param="call_id")
            refused = ev.Error(event_id="event_refused", error=error.to_error_body())
            await websocket.send_text(wire.encode(refused).decode())
            await websocket.close(1008)
            return
        watcher = Watcher(self.voice.state.config.max_unsent_bytes)
        call.watchers.add(watcher)
        writer = TaskSet(logger)  # the attached socket's, ended with it
        writer.spawn(self._write(websocket, watcher))
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                if text is not None:
                    call.receive(text if call.live_session else _decode(text))
        except WebSocketDisconnect:
            pass
        finally:
            call.watchers.discard(watcher)
            await writer.close()

    async def _write(self, websocket: WebSocket, watcher: Watcher) -> None:
        """The call's events to an attached WebSocket; one that stops reading is closed 4002."""
        async with asyncio.TaskGroup() as tasks:
            sender = tasks.create_task(_send_all(websocket, watcher))
            overflow = tasks.create_task(watcher.overflow.wait())
            await asyncio.wait({sender, overflow}, return_when="FIRST_COMPLETED")
            sender.cancel()
            overflow.cancel()
        code, reason = 1000, ""
        if watcher.overflowed:
            self.voice.state.metrics.refused.labels(code="unsent_bytes_exceeded").inc()
            code, reason = CLOSE_NOT_READING, NOT_READING_REASON
        # As a session's socket (the engine's _retire): the close waits until the backend reads again
        # or goes; what it holds meanwhile is bounded (the socket's buffer, not the events).
        with contextlib.suppress(Exception):
            await websocket.close(code, reason)


async def _send_all(websocket: WebSocket, watcher: Watcher) -> None:
    with contextlib.suppress(Exception):  # the socket is gone: its handler's receive says so
        while (text := await watcher.get()) is not None:
            await websocket.send_text(text)


def _decode(text: str) -> wire.ClientEvent | RemoteProtocolError:
    try:
        return wire.decode(text)
    except RemoteProtocolError as error:
        return error


def _shorten_jitter_buffer(pc: Any, track: Any) -> None:
    """Decode the caller's audio one frame behind instead of aiortc's four (~80 ms sooner to the
    turn detector). aiortc 1.16 (pinned) keeps the buffer private; if that changes, keep its own."""
    for transceiver in pc.getTransceivers():
        receiver = transceiver.receiver
        if receiver.track is track:
            buffer = getattr(receiver, "_RTCRtpReceiver__jitter_buffer", None)
            if buffer is not None and hasattr(buffer, "_prefetch"):
                buffer._prefetch = JITTER_PREFETCH


def _track_formats(session: dict[str, Any]) -> dict[str, Any]:
    """``session`` with the audio formats the track carries: the transport decodes Opus to 24 kHz
    PCM16 and encodes the same back, whatever format the key or the request named."""
    pcm = {"type": "audio/pcm", "rate": RATE}
    audio = dict(session.get("audio") or {})
    for direction in ("input", "output"):
        audio[direction] = {**(audio.get(direction) or {}), "format": pcm}
    flat = {k: v for k, v in session.items() if k not in ("input_audio_format", "output_audio_format")}
    return {**flat, "audio": audio}


#: What a resuming call is told when its offer lacks a part, or brings a ``session`` (a resume takes
#: the session as it is, as a socket's does: ``session.update`` on the channel changes it).
RESUME_PARTS = (
    "a call that resumes a session is posted to /v1/realtime/calls?session_id=<id> as multipart"
    " form data with an `sdp` part and a `resume` part: the session.resume event a socket would send"
)
RESUME_AS_IT_IS = (
    "a call that resumes a session takes it as it is: send session.update on the data channel"
    " instead of a `session` part"
)
#: What a refused offer is told when aiortc cannot negotiate it (its own words are its internals).
UNNEGOTIABLE = (
    "the SDP offer could not be negotiated: it must be a WebRTC offer whose audio section offers"
    " Opus, with ICE credentials, a DTLS fingerprint and a setup role"
)
#: Lines a voice call's offer must have: its audio, and what every negotiable offer has.
REQUIRED_LINES = (("m=audio ", "audio media section"), *NEGOTIABLE_LINES)
#: A resuming call's offer has a data channel too: the session's greeting and replay go on it.
RESUME_LINES = (
    *REQUIRED_LINES,
    ("m=application ", "data channel (m=application): a resumed session's events go on it"),
)


async def let_go(call: Call, reason: str) -> None:
    """End a call and let go of all it holds: its tasks (cancelled and awaited), its connection."""
    call.end(reason)
    await call.tasks.close()
    with contextlib.suppress(Exception):
        await call.pc.close()


def _session_too_large(session: dict[str, Any], model: str, limit: int | None) -> RemoteProtocolError | None:
    """The refusal of a call whose ``session.updated`` could not go on the caller's channel."""
    if not session or limit is None:
        return None
    shown = configured_session(session, model, "sess_" + "0" * 16)
    size = len(
        msgspec.json.encode({"type": "session.updated", "event_id": "event_" + "0" * 16, "session": shown})
    )
    return SESSION_TOO_LARGE.error(size=size, limit=limit) if size > limit else None


__all__ = ["CallService", "JSONResponse"]
