"""A WebRTC caller of ``/v1/worlds/calls`` with aiortc (the ``webrtc`` extra): tests and benches use it.

It offers one ``recvonly`` video transceiver (VP8 first, as aiortc and
browsers offer; ``codec="H264"`` puts H.264 first) and a data channel, sends
the session's events as JSON on the channel, and records the server's events
and every decoded frame of the track: when it arrived, its RTP time (90 kHz,
from the track's first frame, which a ``world.chunk`` header's ``video_pts``
names) and its RGB pixels.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
from aiortc import RTCPeerConnection, RTCRtpReceiver

from livegen.client.call import CallPeer

#: RTP ticks (90 kHz) a decoded frame's time may be off its header's ``video_pts``: 1 ms.
PTS_SLACK = 90


@dataclass(frozen=True)
class Frame:
    at: float
    pts: int
    rgb: np.ndarray


class WorldCaller(CallPeer):
    """One world call: ``await connect()``, ``send`` events, read ``events`` and ``frames``, ``close``."""

    calls_path = "/v1/worlds/calls"

    def __init__(self, base_url: str, key: str | None = None, codec: str | None = None) -> None:
        pc = RTCPeerConnection()
        self.transceiver = pc.addTransceiver("video", direction="recvonly")
        if codec is not None:
            capabilities = RTCRtpReceiver.getCapabilities("video")
            codecs = capabilities.codecs if capabilities is not None else []
            first = [c for c in codecs if c.mimeType.lower() == f"video/{codec.lower()}"]
            self.transceiver.setCodecPreferences(first + [c for c in codecs if c not in first])
        self.frames: list[Frame] = []
        self.new_frame = asyncio.Event()
        super().__init__(base_url, key, pc, "world-events")

    async def _record(self, track: Any) -> None:
        while True:
            try:
                frame = await track.recv()
            except Exception:
                return
            rgb = frame.to_ndarray(format="rgb24")
            self.frames.append(Frame(time.monotonic(), int(frame.pts or 0), rgb))
            self.new_frame.set()

    async def offer(self, sdp: str | None = None) -> httpx.Response:
        """Post the offer (this caller's, or ``sdp`` as given) and return the server's answer."""
        if sdp is None:
            await self.pc.setLocalDescription(await self.pc.createOffer())
            sdp = self.pc.localDescription.sdp
        headers = {**self._headers(), "Content-Type": "application/sdp"}
        async with httpx.AsyncClient(timeout=30) as http:
            return await http.post(f"{self.base_url}{self.calls_path}", content=sdp, headers=headers)

    async def connect(self, within: float = 20.0) -> None:
        await self._answered(await self.offer(), within)

    async def frames_from(self, pts: int, count: int = 1, within: float = 30.0) -> list[Frame]:
        """The first ``count`` decoded frames at or after RTP time ``pts`` (within a millisecond:
        the codec's time base may round a tick), once they arrived."""
        deadline = time.monotonic() + within
        while True:
            found = [frame for frame in self.frames if frame.pts >= pts - PTS_SLACK][:count]
            if len(found) == count:
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{len(found)} of {count} frames from pts {pts} arrived")
            self.new_frame.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self.new_frame.wait()
