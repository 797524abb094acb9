"""``/v1/realtime/calls``: voice sessions over WebRTC (aiortc), as OpenAI's browser clients connect.

One engine, two transports: a call is a session of the ``VoiceEngine`` (its
``admit``, ``open_runner`` and ``enlist``), driven by the same core and runner
as the WebSocket; this module only moves media and text:

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
when the peer's connection fails or closes, or when no media has arrived for
``NO_MEDIA_TIMEOUT_S`` (a vanished peer); everything it held is freed. A
server-side WebSocket may attach to a live call with ``/v1/realtime?call_id=``
to watch its events and send its own (a backend running tools for a browser).

ICE: aiortc gathers host candidates, enough on loopback and a LAN; behind NAT
give ``--webrtc-ice-servers`` (STUN/TURN URLs) so it gathers reflexive/relay ones.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fractions
import logging
import secrets
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.websockets import WebSocket, WebSocketDisconnect

from livegen.errors import RemoteProtocolError
from livegen.logs import bind_session, log_event
from livegen.protocol import errors as wire_errors
from livegen.protocol import realtime as wire
from livegen.protocol.errors import WireError
from livegen.protocol.realtime import server as ev
from livegen.runtime.voice.runner import Runner
from livegen.server.auth import presented_key
from livegen.server.bodies import json_object, multipart_fields
from livegen.server.client_secrets import error_response, validated_session

if TYPE_CHECKING:
    from aiortc import RTCPeerConnection

    from livegen.server.voice import VoiceService

logger = logging.getLogger("livegen.server.webrtc")

#: The track's audio: 24 kHz mono PCM16 (the session's output format), 20 ms frames.
RATE = 24_000
FRAME_SAMPLES = 480
FRAME_BYTES = FRAME_SAMPLES * 2
#: Caller audio is fed to the session in pieces this long (a trade of events against latency).
APPEND_MS = 20
#: Complete Opus frames the server's jitter buffer holds before decoding (aiortc's default: 4).
JITTER_PREFETCH = 1
#: A call with no caller media for this long has lost its peer and ends.
NO_MEDIA_TIMEOUT_S = 5.0
#: How often the track reports what it has sent of an answer (``playback.ack``).
ACK_INTERVAL_S = 0.1

INVALID_OFFER = WireError(
    "invalid_offer", "{detail}", "livegen", "a malformed SDP offer, or one without audio"
)
CALL_NOT_FOUND = WireError("call_not_found", "no live call with id {call_id!r}", "livegen", "an unknown call")
TOO_MANY_CALLS = WireError(
    "too_many_sessions", "the server holds {limit} WebRTC calls", "livegen", "over `--webrtc-max-calls`"
)
#: HTTP status for each refusal code at call setup.
STATUS = {"model_not_ready": 503, "too_many_sessions": 429, "model_error": 500, "call_not_found": 404}


def _event_id() -> str:
    return "event_" + secrets.token_hex(8)


class AnswerTrack:
    """The outgoing audio track: answer audio queued by response, silence between answers."""

    kind = "audio"

    def __init__(self, call: Call) -> None:
        from aiortc.mediastreams import MediaStreamTrack

        self._call = call
        self._queue: deque[tuple[str, bytes]] = deque()
        self._buffered = 0
        #: Responses whose audio has all been generated (``response.done``): stopped when drained.
        self._finished: set[str] = set()
        self.playing: str | None = None
        self.sent_ms: dict[str, float] = {}
        self._last_ack = 0.0
        self._start: float | None = None
        self._timestamp = 0
        outer = self

        class Track(MediaStreamTrack):
            kind = "audio"

            async def recv(self) -> Any:
                return await outer.recv()

        self.track = Track()

    def push(self, response_id: str, pcm: bytes) -> bool:
        """Queue answer audio; True when it is the first of that response (playback starts)."""
        is_first = response_id not in self.sent_ms and all(rid != response_id for rid, _ in self._queue)
        self._queue.append((response_id, pcm))
        self._buffered += len(pcm)
        if is_first:
            self.sent_ms.setdefault(response_id, 0.0)
            while len(self.sent_ms) > 16:
                del self.sent_ms[next(iter(self.sent_ms))]
            self.playing = response_id
        return is_first

    def finish(self, response_id: str) -> None:
        if self.playing != response_id:
            return  # no audio (text, a tool call), or it has already stopped or been cleared
        if self._queue:
            self._finished.add(response_id)  # stopped when the track has sent the rest
        else:
            self._stopped(response_id)

    def clear(self) -> bool:
        """Drop all queued audio at once; True when some was playing."""
        was_playing = self.playing is not None
        self._queue.clear()
        self._buffered = 0
        self.playing = None
        return was_playing

    def _stopped(self, response_id: str) -> None:
        self.playing = None
        self._finished.discard(response_id)
        self._call.send_side({"type": "output_audio_buffer.stopped", "response_id": response_id})

    def _take(self) -> tuple[bytes, str | None]:
        out = bytearray()
        rid: str | None = None
        while self._queue and len(out) < FRAME_BYTES:
            rid, pcm = self._queue[0]
            need = FRAME_BYTES - len(out)
            out += pcm[:need]
            if len(pcm) > need:
                self._queue[0] = (rid, pcm[need:])
            else:
                self._queue.popleft()
        self._buffered -= len(out)
        if rid is not None:
            self.sent_ms[rid] = self.sent_ms.get(rid, 0.0) + len(out) / 2 / RATE * 1000.0
        return bytes(out).ljust(FRAME_BYTES, b"\0"), rid

    async def recv(self) -> Any:
        """The next 20 ms frame, paced at real time (aiortc encodes it as Opus)."""
        import av

        if self._start is None:
            self._start = time.monotonic()
        else:
            self._timestamp += FRAME_SAMPLES
            wait = self._start + self._timestamp / RATE - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        pcm, rid = self._take()
        if rid is not None:
            self._maybe_ack(rid)
        if self.playing is not None and not self._queue and self.playing in self._finished:
            self._stopped(self.playing)
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
        frame.planes[0].update(pcm)
        frame.pts = self._timestamp
        frame.sample_rate = RATE
        frame.time_base = fractions.Fraction(1, RATE)
        return frame

    def _maybe_ack(self, response_id: str) -> None:
        now = time.monotonic()
        if now - self._last_ack >= ACK_INTERVAL_S:
            self._last_ack = now
            ack = wire.PlaybackAck(response_id=response_id, played_ms=int(self.sent_ms[response_id]))
            self._call.put_internal(ack)


class Call:
    """One WebRTC call: its peer connection, its session's runner, and what it sends where."""

    def __init__(self, call_id: str, pc: RTCPeerConnection) -> None:
        self.id = call_id
        self.pc = pc
        self.runner: Runner | None = None
        self.channel: Any = None
        self._pending: list[str] = []
        self.watchers: set[asyncio.Queue[str | None]] = set()
        self.inbox: asyncio.Queue[wire.ClientEvent | RemoteProtocolError] = asyncio.Queue(maxsize=1024)
        self.ended = asyncio.Event()
        self.end_reason = ""
        self.last_media = time.monotonic()
        self.answer = AnswerTrack(self)
        self._cleared = False

    def end(self, reason: str) -> None:
        if not self.ended.is_set():
            self.end_reason = reason
            self.ended.set()

    async def send_text(self, text: str) -> None:
        """The runner's writer: the data channel (held until it opens) and any attached WebSockets."""
        self.emit(text)

    def emit(self, text: str) -> None:
        channel = self.channel
        if channel is not None and channel.readyState == "open":
            for held in self._pending:
                channel.send(held)
            self._pending.clear()
            channel.send(text)
        else:
            self._pending.append(text)
        for watcher in self.watchers:
            with contextlib.suppress(asyncio.QueueFull):
                watcher.put_nowait(text)

    def open_channel(self, channel: Any) -> None:
        self.channel = channel
        for held in self._pending:
            channel.send(held)
        self._pending.clear()

    def send_side(self, event: dict[str, Any]) -> None:
        """A transport event (``output_audio_buffer.*``), written beside the runner's."""
        self.emit(wire.encode({"type": event["type"], "event_id": _event_id(), **event}).decode())

    def put_internal(self, event: wire.ClientEvent | RemoteProtocolError) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self.inbox.put_nowait(event)

    def outgoing(self, typed: ev.ServerEvent) -> dict[str, Any] | None:
        """The runner's events as WebRTC carries them: answer audio to the track, not the channel."""
        event = ev.as_dict(typed)
        kind = event["type"]
        if kind == "response.output_audio.delta":
            rid = event["response_id"]
            if self.answer.push(rid, base64.b64decode(event["delta"])):
                return {"type": "output_audio_buffer.started", "event_id": _event_id(), "response_id": rid}
            return None
        if kind == "response.done":
            response = event["response"]
            if response.get("status") == "cancelled" and self.answer.clear():
                self._cleared = True
                self.send_side({"type": "output_audio_buffer.cleared", "response_id": response["id"]})
            else:
                self.answer.finish(response["id"])
        elif kind == "output_audio_buffer.cleared":
            if self._cleared:  # already said, with the cancelled response's id
                self._cleared = False
                return None
        elif kind == "response.created":
            self._cleared = False
        return event


class CallService:
    """The WebRTC transport of ``VoiceService``: call setup, the calls, hangup, attaching."""

    def __init__(self, voice: VoiceService) -> None:
        self.voice = voice
        self.engine = voice.engine
        self.calls: dict[str, Call] = {}
        #: Calls being set up (between the offer and the answer), counted against the limit too.
        self.num_answering = 0
        self.tasks: set[asyncio.Task[None]] = set()

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/v1/realtime/calls", _cors(self.create), methods=["POST", "OPTIONS"]),
            Route("/v1/realtime/calls/{call_id}/hangup", _cors(self.hangup), methods=["POST", "OPTIONS"]),
        ]

    async def stop(self) -> None:
        for call in list(self.calls.values()):
            call.end("server_shutdown")
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=5.0)

    async def create(self, request: Request) -> Response:
        try:
            sdp, session = await _offer(request)  # read before a slot is taken: a slow body holds none
        except RemoteProtocolError as error:
            return self._refuse(error)
        self.num_answering += 1
        try:
            return await self._create(request, sdp, session)
        finally:
            self.num_answering -= 1

    async def _create(self, request: Request, sdp: str, session: dict[str, Any] | None) -> Response:
        try:
            _check_offer(sdp)
            config = self.voice.state.config
            if len(self.calls) + self.num_answering > config.webrtc_max_calls:  # this one is answering
                raise TOO_MANY_CALLS.error(limit=config.webrtc_max_calls)
            secret = self.voice.client_secrets.lookup(presented_key(request.scope))
            bound = {**(secret.session if secret is not None else {}), **(session or {})}
            requested = bound.get("model") or request.query_params.get("model") or self.engine.default_model
            validated_session(bound, requested)
            name, model = await self.engine.admit(requested)
        except RemoteProtocolError as error:
            return self._refuse(error)
        return await self._answer(sdp, _track_formats(bound) if bound else bound, name, model)

    async def _answer(self, sdp: str, bound: dict[str, Any], name: str, model: Any) -> Response:
        from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

        pc = RTCPeerConnection(RTCConfiguration(iceServers=self._ice_servers()))
        call = Call("rtc_" + secrets.token_hex(12), pc)
        try:
            self._wire_peer(call)  # before the offer: aiortc announces the caller's track while applying it
            await pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
            pc.addTrack(call.answer.track)  # on the offer's audio transceiver: one track both ways
            answer = await pc.createAnswer()
            await pc.setLocalDescription(answer)
            runner = await self.engine.open_runner(
                "sess_" + secrets.token_hex(8), name, model, call.send_text, call.outgoing
            )
        except RemoteProtocolError as refused:
            await pc.close()
            return error_response(refused, STATUS.get(refused.code, 400))
        except Exception as exc:  # aiortc rejects what it cannot negotiate
            await pc.close()
            error = INVALID_OFFER.error(detail=f"the SDP offer could not be negotiated: {exc}", param="sdp")
            self._count_error(error)
            log_event(logger, "webrtc.offer_refused", logging.WARNING, error=str(exc))
            return error_response(error, 400)
        call.runner = runner
        if bound:
            update = {"type": "session.update", "session": bound}
            await runner.put_client(wire.decode(msgspec.json.encode(update)))
        self.calls[call.id] = call
        task = asyncio.create_task(self._serve(call, runner, name))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        headers = {"Location": f"/v1/realtime/calls/{call.id}"}
        return Response(
            pc.localDescription.sdp, status_code=201, media_type="application/sdp", headers=headers
        )

    def _ice_servers(self) -> list[Any]:
        from aiortc import RTCIceServer

        urls = self.voice.state.config.webrtc_ice_servers
        return [RTCIceServer(urls=url) for url in urls]

    def _wire_peer(self, call: Call) -> None:
        """Route the peer's track, data channel and connection state into the call."""
        pc = call.pc

        @pc.on("track")
        def on_track(track: Any) -> None:
            if track.kind == "audio":
                _shorten_jitter_buffer(pc, track)
                self._spawn(self._listen(call, track))

        @pc.on("datachannel")
        def on_datachannel(channel: Any) -> None:
            if channel.label != "oai-events":
                return

            @channel.on("message")  # type: ignore[untyped-decorator]
            def on_message(message: Any) -> None:
                if isinstance(message, str):
                    call.put_internal(_decode(message))
                else:
                    call.put_internal(wire_errors.INVALID_EVENT.error(detail=wire.BINARY_DETAIL))

            if channel.readyState == "open":
                call.open_channel(channel)
            else:
                channel.on("open", lambda: call.open_channel(channel))

        @pc.on("connectionstatechange")
        def on_state() -> None:
            if pc.connectionState in ("failed", "closed"):
                call.end(f"peer_{pc.connectionState}")

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

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
            call.last_media = time.monotonic()
            for out in resampler.resample(frame):
                piece += np.asarray(out.to_ndarray(), dtype="<i2").tobytes()
            if len(piece) >= size:
                audio = base64.b64encode(bytes(piece)).decode()
                piece.clear()
                call.put_internal(wire.AudioAppend(audio=audio))

    async def _serve(self, call: Call, runner: Runner, name: str) -> None:
        """Own the call from answer to end: run its session, feed it, then free everything."""
        with bind_session(runner.session.id):
            undo = self.engine.enlist(runner)
            log_event(logger, "webrtc.call_opened", call=call.id, model=name)
            run = asyncio.create_task(runner.run())
            feed = asyncio.create_task(self._feed(call, runner))
            watchdog = asyncio.create_task(self._watch(call))
            ended = asyncio.create_task(call.ended.wait())
            try:
                await asyncio.wait({run, ended}, return_when="FIRST_COMPLETED")
            finally:
                await runner.stop(call.end_reason or "call_ended")
                with contextlib.suppress(Exception):
                    await run
                for task in (feed, watchdog, ended):
                    task.cancel()
                undo()
                self.calls.pop(call.id, None)
                for watcher in call.watchers:
                    watcher.put_nowait(None)
                with contextlib.suppress(Exception):
                    await call.pc.close()
                call.end("ended")
                log_event(logger, "webrtc.call_closed", call=call.id, reason=call.end_reason)

    async def _feed(self, call: Call, runner: Runner) -> None:
        while True:
            await runner.put_client(await call.inbox.get())

    async def _watch(self, call: Call) -> None:
        """End a call whose peer has gone quiet (no ICE consent, no packets)."""
        while True:
            await asyncio.sleep(1.0)
            if time.monotonic() - call.last_media > NO_MEDIA_TIMEOUT_S:
                call.end("peer_silent")
                return

    async def hangup(self, request: Request) -> Response:
        call_id = request.path_params["call_id"]
        call = self.calls.get(call_id)
        if call is None:
            error = CALL_NOT_FOUND.error(call_id=call_id, param="call_id")
            return error_response(error, 404)
        call.end("hangup")
        return Response(status_code=200)

    async def attach(self, websocket: WebSocket, call_id: str) -> None:
        """A server-side WebSocket on a live call: it sees the call's events and may send its own."""
        call = self.calls.get(call_id)
        if call is None or call.runner is None:
            error = CALL_NOT_FOUND.error(call_id=call_id, param="call_id")
            body = {"type": "error", "event_id": "event_refused", "error": error.to_error_body()}
            await websocket.send_text(wire.encode(body).decode())
            await websocket.close(1008)
            return
        outbox: asyncio.Queue[str | None] = asyncio.Queue(maxsize=4096)
        call.watchers.add(outbox)
        writer = asyncio.create_task(_write(websocket, outbox))
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                if text is not None:
                    call.put_internal(_decode(text))
        except WebSocketDisconnect:
            pass
        finally:
            call.watchers.discard(outbox)
            writer.cancel()

    def _refuse(self, error: RemoteProtocolError) -> Response:
        self._count_error(error)
        log_event(logger, "webrtc.call_refused", logging.WARNING, code=error.code)
        return error_response(error, STATUS.get(error.code, 400))

    def _count_error(self, error: RemoteProtocolError) -> None:
        self.voice.state.metrics.errors.labels(kind="voice", code=error.code).inc()


def _cors(handler: Any) -> Any:
    """Let pages on other origins call (the origin check upstream already allowed this one):
    answer the preflight, and let them read the answer, its errors and its ``Location``."""

    async def endpoint(request: Request) -> Response:
        origin = request.headers.get("origin")
        if request.method == "OPTIONS":
            response: Response = Response(status_code=204)
            response.headers["Access-Control-Allow-Methods"] = "POST"
            response.headers["Access-Control-Allow-Headers"] = "authorization, content-type"
            response.headers["Access-Control-Max-Age"] = "600"
        else:
            response = await handler(request)
        if origin is not None:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Expose-Headers"] = "Location"
            response.headers["Vary"] = "Origin"
        return response

    return endpoint


async def _write(websocket: WebSocket, outbox: asyncio.Queue[str | None]) -> None:
    while (text := await outbox.get()) is not None:
        await websocket.send_text(text)
    with contextlib.suppress(Exception):
        await websocket.close(1000)


def _decode(text: str) -> wire.ClientEvent | RemoteProtocolError:
    try:
        return wire.decode(text)
    except RemoteProtocolError as error:
        return error


async def _offer(request: Request) -> tuple[str, dict[str, Any] | None]:
    """The SDP offer and the optional ``session`` of a call request (``application/sdp`` or multipart),
    read and parsed under the limits of ``server/bodies.py``."""
    content_type = request.headers.get("content-type", "")
    body = await request.body()
    if not content_type.startswith("multipart/form-data"):
        return body.decode("utf-8", "replace"), None
    fields = multipart_fields(body, content_type)
    if "sdp" not in fields:
        raise wire_errors.MISSING_REQUIRED_PARAMETER.error(name="sdp", param="sdp")
    session = json_object(fields["session"], "session") if "session" in fields else None
    return fields["sdp"].decode("utf-8", "replace"), session


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


def _check_offer(sdp: str) -> None:
    if not sdp.lstrip().startswith("v=0"):
        raise INVALID_OFFER.error(
            detail="the body is not an SDP offer (it must start with 'v=0')", param="sdp"
        )
    if "\nm=audio " not in sdp.replace("\r\n", "\n"):
        raise INVALID_OFFER.error(detail="the SDP offer has no audio media section", param="sdp")


__all__ = ["AnswerTrack", "Call", "CallService", "JSONResponse"]
