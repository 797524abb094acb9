"""One WebRTC call once it is answered: its answer track, its data channel's writer, and who may see it.

``server/webrtc/peer.py`` sets calls up and tears them down; this module owns what
happens inside a live one:

- ``AnswerTrack``: the outgoing audio track (answer audio queued by response,
  20 ms frames at real time, silence between answers);
- ``Call``: the session's events on the way out. Everything the runner writes,
  and the track's own ``output_audio_buffer.*`` events, go through one ordered
  queue that a single writer task moves onto the ``oai-events`` channel. The
  writer keeps what the channel has buffered in SCTP under
  ``CHANNEL_HIGH_WATER`` and the queue under ``QUEUE_HIGH_WATER``; past that
  the runner's writer waits, so the backlog of a caller that asks for more than
  it reads collects in the runner's outbox, where ``--max-unsent-bytes`` holds
  as for a socket (``unsent_bytes_exceeded``, the call ends ``outbox_overflow``).
- The caller's message limit (``a=max-message-size`` of its offer, RFC 8841's
  64 KiB when absent; Chrome and aiortc say 256 KiB): an event larger than it
  cannot go on the channel (sending it would kill the channel). The caller gets
  an ``error`` (``event_too_large``) in its place; attached WebSockets still get
  the event whole. A session whose configuration could not be shown on the
  channel is refused when the call is offered (``session_too_large``).
- Attached WebSockets (``Watcher``): each has its own outbox, bounded by
  ``--max-unsent-bytes``; a backend that stops reading is closed 4002 and the
  call goes on.
- Who may touch the call: it remembers the ephemeral key that opened it, so
  hangup and attach take that key or the server's, never another ``ek_`` key
  (``call_routes.may_touch``).
- Its tasks (``tasks``): the channel's writer, the watchdog and the caller's
  audio listener, cancelled and awaited when the call is let go.
- ``CallLink``: the call as its session's link (``runtime.voice.lifecycle.Link``);
  the session's owner runs its lifecycle as a socket's, so a call lost without
  a goodbye parks its session and a WebSocket may resume it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fractions
import logging
import re
import secrets
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from livegen.errors import RemoteProtocolError
from livegen.protocol import realtime as wire
from livegen.protocol.errors import WireError
from livegen.protocol.realtime import server as ev
from livegen.runtime.closes import CLOSE_NOT_READING
from livegen.tasks import TaskSet

if TYPE_CHECKING:
    from aiortc import RTCPeerConnection

#: The track's audio: 24 kHz mono PCM16 (the session's output format), 20 ms frames.
RATE = 24_000
FRAME_SAMPLES = 480
FRAME_BYTES = FRAME_SAMPLES * 2
#: How often the track reports what it has sent of an answer (``playback.ack``).
ACK_INTERVAL_S = 0.1
#: RFC 8841: an offer without ``a=max-message-size`` takes messages up to 64 KiB.
DEFAULT_MAX_MESSAGE_BYTES = 65_536
#: Bytes buffered in the channel's SCTP queue before the writer waits for the peer to take some.
CHANNEL_HIGH_WATER = 256 * 1024
CHANNEL_LOW_WATER = 64 * 1024
#: Bytes in the call's queue before the runner's writer waits. Small, so that a backlog waits in
#: the runner's outbox: that is where ``--max-unsent-bytes`` counts it, and where it is dropped
#: when the budget ends the session, so ``unsent_bytes_exceeded`` and ``session.closed`` go next.
QUEUE_HIGH_WATER = 64 * 1024
#: Seconds a call's last events (``session.closed``) may take to leave before the connection closes.
FLUSH_TIMEOUT_S = 5.0
#: How a call's connection is lost without a goodbye (its session parks; ``close_code``). A peer
#: silent past the watchdog is one too: a page navigated away, a network gone, is often never
#: seen by ICE as closed, and its session must wait for the page's resume as a reload's does.
LOST_REASONS = frozenset({"peer_failed", "peer_closed", "peer_track_ended", "peer_silent"})
_MAX_MESSAGE = re.compile(r"^a=max-message-size:(\d+)\s*$", re.MULTILINE)

EVENT_TOO_LARGE = WireError(
    "event_too_large",
    "a {event_type} event of {size} bytes is larger than the data channel's messages"
    " (at most {limit} bytes, the caller's max-message-size): it was not sent on the channel;"
    " a WebSocket attached to the call receives it whole",
    "livegen",
    "in place of a server event too large for the caller's data channel; the call goes on",
    kind=None,
)
TOO_MANY_EVENTS = WireError(
    "too_many_events",
    "{limit} events from this call wait for its session already: this one was not taken; send fewer at once",
    "livegen",
    "a client event that arrives while the call's inbox is full (it is not taken)",
    kind=None,
)
SESSION_TOO_LARGE = WireError(
    "session_too_large",
    "the session's configuration makes a session.updated event of {size} bytes, larger than the"
    " data channel's messages (at most {limit} bytes, the caller's max-message-size):"
    " shorten its instructions or tools",
    "livegen",
    "at call setup: the key's or the request's `session` could not be shown on the data channel",
    param="session",
)


def max_message_bytes(sdp: str) -> int | None:
    """The largest message the caller takes on its data channel (None: any size, RFC 8841's 0)."""
    found = _MAX_MESSAGE.search(sdp.replace("\r\n", "\n"))
    if found is None:
        return DEFAULT_MAX_MESSAGE_BYTES
    size = int(found.group(1))
    return size if size > 0 else None


def _event_id() -> str:
    return "event_" + secrets.token_hex(8)


def _event_type(text: str) -> str:
    found = re.match(r'\{"type":"([a-z_.]{1,64})"', text)
    return found.group(1) if found else "server"


def unacked(channel: Any) -> bool:
    """Whether the channel holds data the peer has not acknowledged: its own buffer, and SCTP's
    queues (``bufferedAmount`` drops when data reaches SCTP, before it is sent; closing then would
    lose the call's last events). aiortc 1.16 (pinned) keeps those queues private; if that changes,
    the channel's own buffer is all that is waited for."""
    if channel.bufferedAmount > 0:
        return True
    sctp = channel.transport
    queued = (getattr(sctp, name, ()) for name in ("_data_channel_queue", "_outbound_queue", "_sent_queue"))
    return any(len(queue) > 0 for queue in queued)


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
        self._call.send_side(ev.OutputAudioBufferStopped(response_id=response_id))

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


class Watcher:
    """An attached WebSocket's outbox: the call's events, bounded in bytes (``--max-unsent-bytes``)."""

    def __init__(self, budget: int) -> None:
        self._budget = budget
        self._queue: deque[str] = deque()
        self._bytes = 0
        self._ready = asyncio.Event()
        self._is_closed = False
        #: It stopped reading: what was queued passed the budget, and it is closed 4002.
        self.overflowed = False
        self.overflow = asyncio.Event()

    @property
    def unsent_bytes(self) -> int:
        return self._bytes

    def put(self, text: str) -> None:
        if self._is_closed:
            return
        if self._queue and self._bytes + len(text) > self._budget:
            self.overflowed = True
            self.overflow.set()
            self.close()
            return
        self._queue.append(text)
        self._bytes += len(text)
        self._ready.set()

    def close(self) -> None:
        """No more events: the watcher ends after what it holds (none, if it overflowed)."""
        self._is_closed = True
        if self.overflowed:
            self._queue.clear()
            self._bytes = 0
        self._ready.set()

    async def get(self) -> str | None:
        """The next event, or None once the watcher is closed and empty."""
        while not self._queue:
            if self._is_closed:
                return None
            self._ready.clear()
            await self._ready.wait()
        text = self._queue.popleft()
        self._bytes -= len(text)
        return text


class Call:
    """One WebRTC call: its peer connection, its session's runner, and what it sends where."""

    def __init__(
        self,
        call_id: str,
        pc: RTCPeerConnection,
        key: str | None,
        max_message: int | None,
        has_channel: bool = True,
    ) -> None:
        self.id = call_id
        #: The offer has a data channel section; without one, events go to attached WebSockets only.
        self.has_channel = has_channel
        self.pc = pc
        #: The ephemeral key that opened the call (None: the server's key, or a server without one).
        self.key = key
        #: The caller's largest data-channel message (None: any size).
        self.max_message = max_message
        self.channel: Any = None
        self.watchers: set[Watcher] = set()
        #: The caller's events for its session (channel, track, attached backends), and the close
        #: code its link reports when the call has ended (``CallLink.receive``).
        self.inbox: asyncio.Queue[str | wire.ClientEvent | RemoteProtocolError | int] = asyncio.Queue(1024)
        #: The GPT-Live session the call carries (``server/realtime/live.py``; its sideband finds it by this):
        #: channel text goes to its link undecoded, and no ``output_audio_buffer.*`` (GPT-Live has none).
        self.live_session: str | None = None
        self.ended = asyncio.Event()
        self.end_reason = ""
        #: Set when the session has let go of the call (its last events have left): tear it down.
        self.closed = asyncio.Event()
        #: When the caller was last heard: media on its track, or a message on its data channel.
        self.last_heard = time.monotonic()
        self.answer = AnswerTrack(self)
        #: The call's own tasks (its writer, watchdog and listener): cancelled and awaited at its end.
        self.tasks = TaskSet(logging.getLogger("livegen.server.calls"))
        self._cleared = False
        #: Wire text for the channel, in order, and its size; the writer task moves it on.
        self._queue: deque[str] = deque()
        self.queued_bytes = 0
        self._queued = asyncio.Event()
        self._room = asyncio.Event()  # set while the queue is under QUEUE_HIGH_WATER
        self._room.set()
        self._channel_room = asyncio.Event()  # set while the channel is open and under its high water

    def end(self, reason: str) -> None:
        if not self.ended.is_set():
            self.end_reason = reason
            self.ended.set()
            self._room.set()  # a runner waiting for room goes on (its events are dropped at close)
            # Wakes the session's reader; a full inbox is read up to this (``CallLink.receive``).
            with contextlib.suppress(asyncio.QueueFull):
                self.inbox.put_nowait(self.close_code())

    def close_code(self) -> int:
        """The code the call's link reports to its session once the call has ended: a connection
        lost without a goodbye (1006) parks the session for a resume, as a socket's would; a
        hangup, ``session.close``, a silent peer (told ``session.closed``) or a shutdown ends it."""
        return 1006 if self.end_reason in LOST_REASONS else 1000

    # -- out: the runner's events and the track's, in order ---------------------------------------
    async def send_text(self, text: str) -> None:
        """The runner's writer: queue the event, then wait while the channel's backlog is large."""
        self.emit(text)
        while not self._room.is_set():
            await self._room.wait()

    def emit(self, text: str) -> None:
        for watcher in self.watchers:
            watcher.put(text)
        if not self.has_channel:
            return
        self._queue.append(text)
        self.queued_bytes += len(text)
        if self.queued_bytes > QUEUE_HIGH_WATER and not self.ended.is_set():
            self._room.clear()
        self._queued.set()

    def send_side(self, event: ev.ServerEvent) -> None:
        """A transport event (``output_audio_buffer.*``), written beside the runner's."""
        if self.live_session is not None:
            return
        event.event_id = _event_id()
        self.emit(wire.encode(event).decode())

    def open_channel(self, channel: Any) -> None:
        self.channel = channel
        channel.bufferedAmountLowThreshold = CHANNEL_LOW_WATER
        channel.on("bufferedamountlow", self._channel_room.set)
        self._channel_room.set()

    async def write(self) -> None:
        """The writer task: the queue onto the channel, within the caller's message limit and the
        channel's high water (a caller that reads slowly holds the queue, then the runner, back)."""
        while True:
            while not self._queue:
                self._queued.clear()
                await self._queued.wait()
            await self._wait_for_channel()
            text = self._queue.popleft()
            self.queued_bytes -= len(text)
            if self.queued_bytes <= QUEUE_HIGH_WATER:
                self._room.set()
            self._send(text)

    async def _wait_for_channel(self) -> None:
        while True:
            channel = self.channel
            is_open = channel is not None and channel.readyState == "open"
            if is_open and channel.bufferedAmount <= CHANNEL_HIGH_WATER:
                return
            self._channel_room.clear()
            await self._channel_room.wait()

    def _send(self, text: str) -> None:
        limit = self.max_message
        # UTF-8 takes at most 4 bytes a character: most events need no encoding to be measured.
        if limit is not None and len(text) * 4 > limit and (size := len(text.encode())) > limit:
            body = EVENT_TOO_LARGE.event_body(event_type=_event_type(text), size=size, limit=limit)
            text = wire.encode(ev.Error(event_id=_event_id(), error=body)).decode()
        with contextlib.suppress(Exception):  # the channel closed under us: the call is ending
            self.channel.send(text)

    async def flush(self) -> None:
        """Let the call's last events leave (bounded: the peer may be gone). A channel not open
        yet is waited for: a resume refused at once has its error to tell a caller still connecting."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FLUSH_TIMEOUT_S):
                while self._queue or (self.channel is not None and unacked(self.channel)):
                    state = "connecting" if self.channel is None else self.channel.readyState
                    if state not in ("connecting", "open") or self.end_reason in LOST_REASONS:
                        return
                    await asyncio.sleep(0.02)

    # -- in --------------------------------------------------------------------------------------
    def put_internal(self, event: wire.ClientEvent | RemoteProtocolError) -> None:
        """An event of the call's own (the caller's audio, the track's acks): never refused."""
        with contextlib.suppress(asyncio.QueueFull):
            self.inbox.put_nowait(event)

    def receive(self, event: str | wire.ClientEvent | RemoteProtocolError) -> None:
        """A client event from the channel or a backend. A channel cannot be made to wait, so one
        that arrives while the inbox is full is refused with an error, never dropped unsaid."""
        try:
            self.inbox.put_nowait(event)
        except asyncio.QueueFull:
            event_id = getattr(event, "event_id", None)
            body = TOO_MANY_EVENTS.body(limit=self.inbox.maxsize)
            error = {**body, "param": None, "event_id": event_id if isinstance(event_id, str) else None}
            self.emit(wire.encode(ev.Error(event_id=_event_id(), error=error)).decode())

    def outgoing(self, event: ev.ServerEvent) -> ev.ServerEvent | None:
        """The runner's events as WebRTC carries them: answer audio to the track, not the channel."""
        if isinstance(event, ev.OutputAudioDelta):
            rid = event.response_id
            if self.answer.push(rid, base64.b64decode(event.delta)):
                return ev.OutputAudioBufferStarted(event_id=_event_id(), response_id=rid)
            return None
        if isinstance(event, ev.ResponseDone):
            response = event.response
            if response.status == "cancelled" and self.answer.clear():
                self._cleared = True
                self.send_side(ev.OutputAudioBufferCleared(response_id=response.id))
            else:
                self.answer.finish(response.id)
        elif isinstance(event, ev.OutputAudioBufferCleared):
            if self._cleared:  # already said, with the cancelled response's id
                self._cleared = False
                return None
        elif isinstance(event, ev.ResponseCreated):
            self._cleared = False
        return event


class CallLink:
    """A call as its session's owner sees it (``runtime.voice.lifecycle.Link``): the session's
    events out through the call's one writer (the channel, attached backends), the caller's in
    from the call's inbox (its channel, its track's audio and acks, attached backends), and the
    call's end as the link's close. The session's owner runs the lifecycle, as for a socket."""

    def __init__(self, call: Call) -> None:
        self.call = call

    @property
    def end_reason(self) -> str:
        """``session.closed``'s reason when the call ends first (``hangup``, ``peer_silent``...)."""
        return self.call.end_reason or "call_ended"

    async def send_text(self, text: str) -> None:
        await self.call.send_text(text)

    async def receive(self) -> str | wire.ClientEvent | RemoteProtocolError | int:
        call = self.call
        if call.ended.is_set():
            return call.close_code()
        return await call.inbox.get()

    async def close(self, code: int) -> None:
        """The session let go of the call: its last events leave (bounded), then it is torn down."""
        call = self.call
        call.end("outbox_overflow" if code == CLOSE_NOT_READING else "ended")
        try:
            await call.flush()
        finally:
            call.closed.set()
