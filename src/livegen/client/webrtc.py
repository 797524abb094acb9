"""A WebRTC caller of ``/v1/realtime/calls`` with aiortc (the ``webrtc`` extra): tests and benches use it.

It mints an ephemeral key, offers one ``sendrecv`` audio track (a microphone
that plays queued 24 kHz PCM16 in real time, silence otherwise) and the
``oai-events`` data channel, and records the server's events and the audio of
its answer track (resampled to 24 kHz mono).
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import json
import time
from typing import Any

import av
import httpx
import numpy as np
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription

RATE = 24_000
FRAME = 480  # 20 ms


def mint(base_url: str, api_key: str | None = None, **body: Any) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    response = httpx.post(f"{base_url}/v1/realtime/client_secrets", json=body, headers=headers, timeout=10)
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result


class Microphone(MediaStreamTrack):
    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self.pending = bytearray()
        self.start: float | None = None
        self.samples = 0
        #: monotonic time when the last queued speech was sent.
        self.drained_at: float | None = None
        self.drained = asyncio.Event()

    def say(self, pcm24: bytes) -> None:
        self.pending += pcm24
        self.drained_at = None
        self.drained.clear()

    async def recv(self) -> av.AudioFrame:
        if self.start is None:
            self.start = time.monotonic()
        else:
            self.samples += FRAME
            wait = self.start + self.samples / RATE - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        chunk = bytes(self.pending[: FRAME * 2])
        del self.pending[: FRAME * 2]
        if chunk and not self.pending:
            self.drained_at = time.monotonic()
            self.drained.set()
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME)
        frame.planes[0].update(chunk.ljust(FRAME * 2, b"\0"))
        frame.pts = self.samples
        frame.sample_rate = RATE
        frame.time_base = fractions.Fraction(1, RATE)
        return frame


class Caller:
    """One call: ``await connect()``, then ``say``, read ``events`` and ``heard`` audio, ``hangup``."""

    def __init__(self, base_url: str, key: str | None) -> None:
        self.base_url = base_url
        self.key = key
        self.pc = RTCPeerConnection()
        self.microphone = Microphone()
        self.events: list[dict[str, Any]] = []
        #: id(event) -> monotonic time it arrived.
        self.event_times: dict[int, float] = {}
        self.new_event = asyncio.Event()
        #: (monotonic time, 24 kHz PCM16 of one received frame).
        self.frames: list[tuple[float, bytes]] = []
        self.call_id: str | None = None
        self.channel = self.pc.createDataChannel("oai-events")
        self.channel.on("message", self._on_message)
        self.opened = asyncio.Event()
        self.channel.on("open", self.opened.set)
        self._tasks: list[asyncio.Task[None]] = []

        @self.pc.on("track")
        def on_track(track: Any) -> None:
            self._tasks.append(asyncio.ensure_future(self._record(track)))

    def _on_message(self, message: str) -> None:
        event = json.loads(message)
        self.event_times[id(event)] = time.monotonic()
        self.events.append(event)
        self.new_event.set()

    async def _record(self, track: Any) -> None:
        resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
        while True:
            try:
                frame = await track.recv()
            except Exception:
                return
            for out in resampler.resample(frame):
                self.frames.append((time.monotonic(), np.asarray(out.to_ndarray(), "<i2").tobytes()))

    async def offer(self, session: dict[str, Any] | None = None) -> httpx.Response:
        self.pc.addTrack(self.microphone)
        await self.pc.setLocalDescription(await self.pc.createOffer())
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        sdp = self.pc.localDescription.sdp
        async with httpx.AsyncClient(timeout=30) as http:
            url = f"{self.base_url}/v1/realtime/calls"
            if session is None:
                headers["Content-Type"] = "application/sdp"
                return await http.post(url, content=sdp, headers=headers)
            files = {"sdp": (None, sdp), "session": (None, json.dumps(session))}
            return await http.post(url, files=files, headers=headers)

    async def connect(self, session: dict[str, Any] | None = None) -> None:
        response = await self.offer(session)
        assert response.status_code == 201, response.text
        self.call_id = response.headers["location"].rsplit("/", 1)[-1]
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=response.text, type="answer"))
        async with asyncio.timeout(20):
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
                raise AssertionError(f"no {what}: got {self.events}")
            self.new_event.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self.new_event.wait()

    async def event(self, type_: str, within: float = 60.0) -> dict[str, Any]:
        return await self.wait_for(lambda e: e["type"] == type_, within, type_)

    def audio_since(self, since: float, until: float | None = None) -> bytes:
        return b"".join(pcm for t, pcm in self.frames if t >= since and (until is None or t <= until))

    def first_loud_after(self, since: float, level: int = 500) -> float | None:
        for t, pcm in self.frames:
            if t >= since and np.abs(np.frombuffer(pcm, "<i2")).max(initial=0) > level:
                return t
        return None

    async def hangup(self) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        async with httpx.AsyncClient(timeout=10) as http:
            return await http.post(
                f"{self.base_url}/v1/realtime/calls/{self.call_id}/hangup", headers=headers
            )

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await self.pc.close()


def loudness(pcm: bytes) -> float:
    samples = np.frombuffer(pcm, "<i2").astype(np.float32)
    return float(np.sqrt(np.mean(samples**2))) if samples.size else 0.0
