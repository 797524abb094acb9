"""``/v1/worlds/calls``: world sessions over WebRTC, their frames on a video track.

A caller posts an SDP offer (``application/sdp``, or multipart with an ``sdp``
field) with a video section it receives and a data channel, authenticated as
a voice call is (the server's key, or an ephemeral ``ek_`` key); the answer
carries one video track. The session itself is the WebSocket's: each call is
one more ``Link`` (``WorldCallLink``) to a ``SessionOwner``
(``runtime/world/owner.py``), so what the caller sends on the data channel is
read, dispatched and answered exactly as on ``/v1/worlds``. The transport
differs in three places only, its dialect:

- frames: the session makes ``rgb24`` frames (a caller's ``session.update``
  ``output`` is replaced: the track encodes them, once) and they go on the
  video track (``server/world/video.py``), not the channel. Each ``world.chunk``
  header still goes on the channel, with ``video_pts``: where its chunk's
  first frame is on the track (90 kHz, from the track's first frame);
- acks: the track acks each chunk at ``start`` when it sends its first frame,
  so the send position is the ack (W7); a caller's ``chunk.ack`` is taken and
  changes nothing;
- a ``world.reset`` drops the frames of the world before it that the track has
  not sent yet.

A call ends on ``POST /v1/worlds/calls/{id}/hangup``, once ``session.closed``
has gone out, when the data channel or the connection closes, when the
channel has not opened within ``CHANNEL_OPEN_TIMEOUT_S``, when the caller
stops reading its channel past ``--max-unsent-bytes`` (the session's
``unsent_bytes_exceeded``), or when its receiver stops reporting
(``receiver_silent``): every WebRTC receiver sends RTCP receiver reports about
once a second, so a track whose frames draw none for ``RECEIVER_SILENT_S`` is
sent into a void (a caller stopped, frozen or gone without a close), and its
encoder, a fifth of a core a call, would run on until ICE's consent checks
fail 30 s later. A bad offer is refused with the voice calls'
errors (``invalid_offer``, 400), a full server with ``too_many_sessions``
(429, ``--webrtc-max-calls`` world calls at once). In a cluster (``--workers``)
a call's id carries its process's tag, as a voice call's does, so a hangup that
reaches another process is relayed to the one that holds the call
(``cluster/gate.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any, Protocol

from starlette.requests import Request
from starlette.responses import Response

from livegen.errors import InvalidState, RemoteProtocolError
from livegen.logs import log_event
from livegen.protocol import world as wire
from livegen.runtime.closes import CLOSE_NOT_READING
from livegen.runtime.world.owner import LinkClosed, SessionOwner
from livegen.server.http.auth import EPHEMERAL_PREFIX, presented_key
from livegen.server.webrtc.call_routes import (
    INVALID_OFFER,
    NEGOTIABLE_LINES,
    CallRoutes,
    check_offer,
    follow_peer,
    read_offer,
    when_open,
)
from livegen.server.webrtc.calls import CHANNEL_HIGH_WATER, CHANNEL_LOW_WATER, FLUSH_TIMEOUT_S, unacked
from livegen.server.world.video import FrameTrack, negotiated_codec
from livegen.tasks import TaskSet

if TYPE_CHECKING:
    from aiortc import RTCPeerConnection

    from livegen.runtime.world.engine import WorldEngine
    from livegen.server.state import State

logger = logging.getLogger("livegen.server.world_calls")

#: Caller messages waiting for the session at most; one more is refused (``too_many_events``).
MAX_INBOX = 256
#: Seconds an answered call may take to open its data channel before it is let go.
CHANNEL_OPEN_TIMEOUT_S = 20.0
#: Seconds a track may send frames with no RTCP receiver report before its call is ended.
RECEIVER_SILENT_S = 6.0
#: How often the receiver-report watchdog looks.
RECEIVER_CHECK_S = 1.0
#: Ends whose last events are worth waiting for (``session.closed``, ``unsent_bytes_exceeded``);
#: after a hangup, a shutdown or a lost peer the connection is let go at once.
FLUSHED = frozenset({"session_closed", "outbox_overflow", "closed"})
#: What a refused offer is told when aiortc cannot negotiate it (its own words are its internals).
UNNEGOTIABLE = (
    "the SDP offer could not be negotiated: it must be a WebRTC offer whose video section receives"
    " VP8 or H.264, with ICE credentials, a DTLS fingerprint and a setup role"
)
#: Lines a world call's offer must have: its video and channel, and what every negotiable offer has.
REQUIRED_LINES = (
    ("m=video ", "video media section: a world call sends its frames on a video track"),
    ("m=application ", "data channel (m=application): a world call's events go on it"),
    *NEGOTIABLE_LINES,
)


def caller_text(text: str) -> str | None:
    """A caller's channel message as its session takes it (the call's dialect, module docstring):
    ``session.update`` asks for ``rgb24`` frames, a valid ``chunk.ack`` is taken (None); anything
    else, malformed messages included, goes as it came, for the owner to answer."""
    if len(text) > wire.MAX_MESSAGE_BYTES or ('"session.update"' not in text and '"chunk.ack"' not in text):
        return text
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):
        return text
    if not isinstance(message, dict):
        return text
    if message.get("type") == "chunk.ack":
        try:
            wire.decode_client(text)
        except RemoteProtocolError:
            return text  # the owner says what is wrong with it
        return None
    session = message.get("session")
    if message.get("type") == "session.update" and isinstance(session, dict):
        session["output"] = {"format": "rgb24"}
        return json.dumps(message)
    return text


class WorldCall:
    """One world call: its peer connection, its track, its channel and the caller's inbox."""

    def __init__(self, call_id: str, pc: RTCPeerConnection, key: str | None) -> None:
        self.id = call_id
        self.pc = pc
        #: The ephemeral key that opened the call (None: the server's key, or no key).
        self.key = key
        self.channel: Any = None
        self.opened = asyncio.Event()
        #: The caller's messages (at most ``MAX_INBOX`` waiting) and the track's acks (one a chunk,
        #: never refused: a lost ack would hold the session's credit for good); None once ended.
        self.inbox: asyncio.Queue[str | bytes | None] = asyncio.Queue()
        self.ended = asyncio.Event()
        self.end_reason = ""
        self.track = FrameTrack(self._started)
        #: The codec the answer chose (``VP8``, ``H264``).
        self.codec: str | None = None
        #: The RTP sender of the track (its RTCP receiver reports say the caller still reads).
        self.sender: Any = None
        self._channel_room = asyncio.Event()

    def end(self, reason: str) -> None:
        if self.ended.is_set():
            return
        self.end_reason = reason
        self.ended.set()
        self._channel_room.set()  # a writer waiting for room goes on, and finds the call ended
        self.inbox.put_nowait(None)

    def open_channel(self, channel: Any) -> None:
        self.channel = channel
        channel.bufferedAmountLowThreshold = CHANNEL_LOW_WATER
        channel.on("bufferedamountlow", self._channel_room.set)
        self._channel_room.set()
        self.opened.set()

    # -- in ----------------------------------------------------------------------------------
    def _started(self, chunk_index: int) -> None:
        """The track sent a chunk's first frame: that is the session's ack of it, at start."""
        self.inbox.put_nowait(json.dumps({"type": "chunk.ack", "chunk_index": chunk_index, "at": "start"}))

    def receive(self, message: str | bytes) -> None:
        """A caller's message from the channel. A channel cannot be made to wait, so one that
        arrives while the inbox is full is refused with an error, never dropped unsaid."""
        text = caller_text(message) if isinstance(message, str) else message
        if text is None or self.ended.is_set():
            return
        if self.inbox.qsize() < MAX_INBOX:
            self.inbox.put_nowait(text)
        else:
            error = InvalidState(
                f"{MAX_INBOX} messages from this call wait for its session already: this one was not"
                " taken; send fewer at once",
                code="too_many_events",
            )
            self._send_now(wire.encode(wire.error_event(error)).decode())

    # -- out ---------------------------------------------------------------------------------
    def _outgoing(self, text: str) -> str:
        """The session's events as the call carries them (module docstring)."""
        if text.startswith('{"type":"world.chunk"'):
            header = json.loads(text)
            size = (header["num_frames"], header["width"], header["height"])
            header["video_pts"] = self.track.start_chunk(header["chunk_index"], *size)
            return json.dumps(header, separators=(",", ":"))
        if text.startswith(('{"type":"session.created"', '{"type":"session.updated"')):
            self.track.set_fps(float(json.loads(text)["session"]["fps"]))
        elif text.startswith('{"type":"world.reset.done"'):
            self.track.clear()
        return text

    async def send_text(self, text: str) -> None:
        """The session's writer: one event onto the channel, once it has room."""
        text = self._outgoing(text)
        while True:
            if self.ended.is_set():
                raise LinkClosed(1006)
            channel = self.channel
            is_open = channel is not None and channel.readyState == "open"
            if is_open and channel.bufferedAmount <= CHANNEL_HIGH_WATER:
                break
            self._channel_room.clear()
            await self._channel_room.wait()
        self._send_now(text)
        if text.startswith('{"type":"session.closed"'):
            self.end("session_closed")  # its teardown lets this last event leave first

    def _send_now(self, text: str) -> None:
        with contextlib.suppress(Exception):  # the channel closed under us: the call is ending
            self.channel.send(text)

    async def flush(self) -> None:
        """Let the call's last events leave (bounded: the peer may be gone)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FLUSH_TIMEOUT_S):
                while self.channel is not None and unacked(self.channel):
                    if self.channel.readyState != "open":
                        return  # SCTP's queues have no event to wait on: polled
                    await asyncio.sleep(0.02)


class WorldCallLink:
    """A world call as its session's owner sees it (``runtime.world.owner.Link``)."""

    def __init__(self, call: WorldCall) -> None:
        self.call = call

    async def send_text(self, text: str) -> None:
        await self.call.send_text(text)

    async def send_bytes(self, data: bytes) -> None:
        if self.call.ended.is_set():
            raise LinkClosed(1006)
        await self.call.track.put(data)

    async def receive(self) -> str | bytes | None:
        call = self.call
        if call.ended.is_set():
            return None
        return await call.inbox.get()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.call.end("outbox_overflow" if code == CLOSE_NOT_READING else "closed")


class WorldHost(Protocol):
    """The world service as its calls use it (declared here, so that this transport names no type
    of the service that builds it): the app's state, the engine, the sessions' owners."""

    state: State
    engine: WorldEngine
    connections: set[SessionOwner]


class WorldCallService(CallRoutes[WorldCall]):
    """The WebRTC transport of ``WorldService``: call setup and the calls (``CallRoutes``: hangup,
    the limit, refusals, shutdown)."""

    path = "/v1/worlds/calls"
    kind = "world"
    refused_event = "world_call.refused"

    def __init__(self, world: WorldHost) -> None:
        super().__init__(world.state)
        self.world = world

    async def create(self, request: Request) -> Response:
        try:
            sdp = (await read_offer(request)).sdp  # a world call takes no `session` part: ignored
            check_offer(sdp, REQUIRED_LINES)
        except RemoteProtocolError as error:
            return self.refuse(error)
        with self.answering():
            try:
                self.check_room()
                if self.world.engine.manager is None:
                    raise InvalidState("the world model is still loading; retry shortly", code="not_ready")
            except RemoteProtocolError as error:
                return self.refuse(error)
            key = presented_key(request.scope)
            return await self._answer(
                sdp, key if key is not None and key.startswith(EPHEMERAL_PREFIX) else None
            )

    async def _answer(self, sdp: str, key: str | None) -> Response:
        from aiortc import RTCSessionDescription

        pc = self.peer_connection()
        # Tagged with this process in a cluster, so that its hangup reaches it (cluster/gate.py).
        call = WorldCall(self.state.gate.new_id("rtc_", 32), pc, key)
        try:
            _wire_peer(call)
            await pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
            sender = pc.addTrack(call.track.track)  # on the offer's video transceiver
            await pc.setLocalDescription(await pc.createAnswer())
            problem = _unsent_track(pc, sender)
        except Exception as exc:  # aiortc refuses what it cannot negotiate; its words are its internals
            log_event(
                logger, "world_call.offer_refused", logging.WARNING, error=f"{type(exc).__name__}: {exc}"
            )
            problem = UNNEGOTIABLE
        if problem is not None:
            await pc.close()
            return self.refuse(INVALID_OFFER.error(detail=problem, param="sdp"))
        call.codec = negotiated_codec(pc.localDescription.sdp)
        call.sender = sender
        self.calls[call.id] = call
        self.tasks.spawn(self._serve(call))
        headers = {"Location": f"/v1/worlds/calls/{call.id}"}
        return Response(
            pc.localDescription.sdp, status_code=201, media_type="application/sdp", headers=headers
        )

    async def _serve(self, call: WorldCall) -> None:
        """Carry the call from answer to end: its session's owner reads its inbox until the call
        ends, then the call lets go of everything."""
        world = self.world
        owner = SessionOwner(world.engine, WorldCallLink(call), world.state.metrics)
        world.connections.add(owner)
        # The call's id is its capability on a server without a key: it is never logged.
        log_event(logger, "world_call.opened", codec=call.codec)
        watchdog = TaskSet(logger)  # the call's, ended with it
        watchdog.spawn(_until_open(call))
        watchdog.spawn(_while_reported(call))
        try:
            await owner.run()
        finally:
            await watchdog.close()
            world.connections.discard(owner)
            self.calls.pop(call.id, None)
            call.end("ended")
            if call.end_reason in FLUSHED:
                await call.flush()
            with contextlib.suppress(Exception):
                await call.pc.close()
            log_event(logger, "world_call.closed", reason=call.end_reason, frames=call.track.frames_sent)


async def _until_open(call: WorldCall) -> None:
    """End a call whose data channel has not opened in time (the caller never connected)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(CHANNEL_OPEN_TIMEOUT_S):
            await call.opened.wait()
            return
    call.end("channel_never_opened")


async def _while_reported(call: WorldCall) -> None:
    """End a call whose receiver stopped sending RTCP reports while its track sends frames."""
    heard_at: object = None
    quiet_since: float | None = None
    loop = asyncio.get_running_loop()
    while not call.ended.is_set():
        await asyncio.sleep(RECEIVER_CHECK_S)
        if call.sender is None or call.track.frames_sent == 0:
            continue  # nothing sent yet: a receiver has nothing to report
        latest = await _last_report(call.sender)
        if latest is not None and latest != heard_at:
            heard_at, quiet_since = latest, None
            continue
        quiet_since = loop.time() if quiet_since is None else quiet_since
        if loop.time() - quiet_since >= RECEIVER_SILENT_S - RECEIVER_CHECK_S:
            log_event(logger, "world_call.receiver_silent", logging.WARNING, seconds=RECEIVER_SILENT_S)
            call.end("receiver_silent")
            return


async def _last_report(sender: Any) -> object:
    """When the sender last had a receiver report (aiortc's remote-inbound stats), or None."""
    try:
        report = await sender.getStats()
    except Exception:  # the transport closed under us: the call is ending
        return None
    stamps = [s.timestamp for s in report.values() if getattr(s, "type", "") == "remote-inbound-rtp"]
    return max(stamps) if stamps else None


def _wire_peer(call: WorldCall) -> None:
    """Route the caller's data channel and connection state into the call."""
    pc = call.pc

    @pc.on("datachannel")
    def on_datachannel(channel: Any) -> None:
        if call.channel is not None:
            return  # one channel a call: the first the caller opened
        call.channel = channel  # its writer waits until it is open

        @channel.on("message")  # type: ignore[untyped-decorator]
        def on_message(message: Any) -> None:
            call.receive(message)

        channel.on("close", lambda: call.end("channel_closed"))
        when_open(channel, call.open_channel)

    follow_peer(pc, call.end)


def _unsent_track(pc: Any, sender: Any) -> str | None:
    """Why the answer would not send the frames (None: it will): the offer's video section must
    let the caller receive."""
    for transceiver in pc.getTransceivers():
        if transceiver.sender is sender:
            if transceiver.mid is None or transceiver.currentDirection not in ("sendonly", "sendrecv"):
                break
            return None
    return "the SDP offer's video section does not receive video: offer it recvonly or sendrecv"
