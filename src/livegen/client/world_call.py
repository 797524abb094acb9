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
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
from aiortc import RTCPeerConnection, RTCRtpReceiver, RTCSessionDescription

#: RTP ticks (90 kHz) a decoded frame's time may be off its header's ``video_pts``: 1 ms.
PTS_SLACK = 90


@dataclass(frozen=True)
class Frame:
    at: float
    pts: int
    rgb: np.ndarray


class WorldCaller:
    """One world call: ``await connect()``, ``send`` events, read ``events`` and ``frames``, ``close``."""

    def __init__(self, base_url: str, key: str | None = None, codec: str | None = None) -> None:
        self.base_url = base_url
        self.key = key
        self.pc = RTCPeerConnection()
        self.transceiver = self.pc.addTransceiver("video", direction="recvonly")
        if codec is not None:
            capabilities = RTCRtpReceiver.getCapabilities("video")
            codecs = capabilities.codecs if capabilities is not None else []
            first = [c for c in codecs if c.mimeType.lower() == f"video/{codec.lower()}"]
            self.transceiver.setCodecPreferences(first + [c for c in codecs if c not in first])
        self.events: list[dict[str, Any]] = []
        #: id(event) -> monotonic time it arrived.
        self.event_times: dict[int, float] = {}
        self.frames: list[Frame] = []
        self.new_event = asyncio.Event()
        self.new_frame = asyncio.Event()
        self.call_id: str | None = None
        self.channel = self.pc.createDataChannel("world-events")
        self.channel.on("message", self._on_message)
        self.opened = asyncio.Event()
        self.channel.on("open", self.opened.set)
        self._tasks: list[asyncio.Task[None]] = []

        @self.pc.on("track")
        def on_track(track: Any) -> None:
            self._tasks.append(asyncio.ensure_future(self._record(track)))

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    def _on_message(self, message: str) -> None:
        event = json.loads(message)
        self.event_times[id(event)] = time.monotonic()
        self.events.append(event)
        self.new_event.set()

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
            return await http.post(f"{self.base_url}/v1/worlds/calls", content=sdp, headers=headers)

    async def connect(self, within: float = 20.0) -> None:
        response = await self.offer()
        assert response.status_code == 201, response.text
        self.call_id = response.headers["location"].rsplit("/", 1)[-1]
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=response.text, type="answer"))
        async with asyncio.timeout(within):
            await self.opened.wait()

    def send(self, event: dict[str, Any]) -> None:
        self.channel.send(json.dumps(event))

    async def wait_for(self, predicate: Any, within: float = 60.0, what: str = "") -> dict[str, Any]:
        deadline = time.monotonic() + within
        seen = 0
        while True:
            for event in self.events[seen:]:
                if predicate(event):
                    return event
            seen = len(self.events)
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {what}: got {self.events[-20:]}")
            self.new_event.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self.new_event.wait()

    async def event(self, type_: str, within: float = 60.0) -> dict[str, Any]:
        return await self.wait_for(lambda e: e["type"] == type_, within, type_)

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

    async def hangup(self) -> httpx.Response:
        async with httpx.AsyncClient(timeout=10) as http:
            url = f"{self.base_url}/v1/worlds/calls/{self.call_id}/hangup"
            return await http.post(url, headers=self._headers())

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await self.pc.close()
