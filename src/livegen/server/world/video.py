"""The video track of a world call: the session's frames, paced by the frame clock.

A world call (``server/webrtc/world_calls.py``) sends its session's frames on one
video track instead of as binary messages. The session's runner writes a
chunk as always, a ``world.chunk`` header then its frames (raw ``rgb24``: the
call asks for them, so nothing is encoded twice); this track queues them and
hands them to aiortc's encoder (VP8, or H.264 where the offer prefers it) one
frame every ``1 / fps`` seconds. A frame's due time is fixed when its chunk's
header passes (``start_chunk``): the chunk starts at the later of now and the
end of the chunk before it, and its frames follow at the frame interval. The
RTP timestamp of each frame (90 kHz, counted from the track's first frame) is
that due time, so a receiver's jitter buffer sees the real cadence, a stall
included, and the header can say where its chunk starts on the track
(``video_pts``).

Flow control: when the track hands the first frame of a chunk to the encoder,
it calls ``on_started(chunk_index)``; the call turns that into the session's
``chunk.ack`` at ``start`` (docs/world-protocol.md), so the track's send
position is the ack and nothing is generated far ahead of what is sent. The
queue is bounded in playing time (``MAX_QUEUED_S``): past it the session's
sender waits, and what waits is counted in its outbox under
``--max-unsent-bytes`` as for a socket.
"""

from __future__ import annotations

import asyncio
import fractions
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

#: The RTP clock of video (RFC 3551): timestamps count 90 kHz ticks.
VIDEO_CLOCK = 90_000
#: Seconds of frames the track holds before the session's sender waits.
MAX_QUEUED_S = 1.0


@dataclass(slots=True)
class _Frame:
    due: float
    pts: int
    chunk_index: int
    is_first: bool
    shape: tuple[int, int, int]
    rgb: bytes


class FrameTrack:
    """The outgoing video track of one world call (see the module docstring)."""

    kind = "video"

    def __init__(
        self, on_started: Callable[[int], None], clock: Callable[[], float] = time.monotonic
    ) -> None:
        from aiortc.mediastreams import MediaStreamTrack

        self._on_started = on_started
        self._clock = clock
        self._queue: deque[_Frame] = deque()
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._interval = 1 / 16
        #: When the track's first frame was due (its RTP timestamp 0); None before it.
        self._origin: float | None = None
        self._next_due = 0.0
        #: The chunk whose frames ``put`` queues: index, first frame's due time, frames queued, shape.
        self._chunk: tuple[int, float, tuple[int, int, int]] | None = None
        self._num_put = 0
        #: Frames handed to the encoder, for the call's figures.
        self.frames_sent = 0
        outer = self

        class Track(MediaStreamTrack):
            kind = "video"

            async def recv(self) -> Any:
                return await outer.recv()

        self.track = Track()

    def set_fps(self, fps: float) -> None:
        if fps > 0:
            self._interval = 1 / fps

    def start_chunk(self, chunk_index: int, num_frames: int, width: int, height: int) -> int:
        """A chunk's header passed: fix its frames' due times; its first frame's RTP timestamp."""
        due = max(self._clock(), self._next_due)
        if self._origin is None:
            self._origin = due
        self._chunk = (chunk_index, due, (height, width, 3))
        self._num_put = 0
        self._next_due = due + num_frames * self._interval
        return self._pts(due)

    def _pts(self, due: float) -> int:
        assert self._origin is not None
        return round((due - self._origin) * VIDEO_CLOCK)

    async def put(self, rgb: bytes) -> None:
        """The next frame of the current chunk (raw RGB), once the queue has room."""
        while not self._room.is_set():
            await self._room.wait()
        if self._chunk is None:
            return  # frames of a chunk whose header was dropped (a reset): not the world's any more
        index, first_due, shape = self._chunk
        if len(rgb) != shape[0] * shape[1] * shape[2]:
            raise ValueError(f"a frame of {len(rgb)} bytes is not {shape} rgb24")
        due = first_due + self._num_put * self._interval
        self._queue.append(_Frame(due, self._pts(due), index, self._num_put == 0, shape, rgb))
        self._num_put += 1
        if len(self._queue) * self._interval >= MAX_QUEUED_S:
            self._room.clear()
        self._ready.set()

    def clear(self) -> None:
        """Drop the frames not yet sent (a reset: they are of the world before it)."""
        self._queue.clear()
        self._chunk = None
        self._next_due = min(self._next_due, self._clock())
        self._room.set()

    async def recv(self) -> Any:
        """The next frame at its due time (aiortc encodes it); waits while none is queued."""
        import av

        while not self._queue:
            self._ready.clear()
            await self._ready.wait()
        frame = self._queue.popleft()
        if len(self._queue) * self._interval < MAX_QUEUED_S:
            self._room.set()
        wait = frame.due - self._clock()
        if wait > 0:
            await asyncio.sleep(wait)
        if frame.is_first:
            self._on_started(frame.chunk_index)
        self.frames_sent += 1
        pixels = np.frombuffer(frame.rgb, dtype=np.uint8).reshape(frame.shape)
        video = av.VideoFrame.from_ndarray(pixels, format="rgb24")
        video.pts = frame.pts
        video.time_base = fractions.Fraction(1, VIDEO_CLOCK)
        return video


def negotiated_codec(sdp: str) -> str | None:
    """The video codec an SDP answer chose (its ``m=video`` line's first payload), e.g. ``VP8``."""
    lines = sdp.replace("\r\n", "\n").split("\n")
    for line in lines:
        if line.startswith("m=video "):
            parts = line.split()
            if len(parts) < 4:
                return None
            prefix = f"a=rtpmap:{parts[3]} "
            for other in lines:
                if other.startswith(prefix):
                    return other[len(prefix) :].split("/")[0]
            return None
    return None
