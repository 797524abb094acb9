"""A WebRTC caller of ``/v1/realtime/calls`` with aiortc (the ``webrtc`` extra): tests and benches use it.

It mints an ephemeral key, offers one ``sendrecv`` audio track (a microphone
that plays queued 24 kHz PCM16 in real time, silence otherwise) and the
``oai-events`` data channel, and records the server's events and the audio of
its answer track (resampled to 24 kHz mono).
"""

from __future__ import annotations

import asyncio
import fractions
import json
import time
from typing import Any

import av
import httpx
import numpy as np
from aiortc import MediaStreamTrack, RTCPeerConnection

from livegen.client.call import CallPeer

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


class Caller(CallPeer):
    """One call: ``await connect()``, then ``say``, read ``events`` and ``heard`` audio, ``hangup``."""

    calls_path = "/v1/realtime/calls"

    def __init__(self, base_url: str, key: str | None) -> None:
        self.microphone = Microphone()
        #: (monotonic time, 24 kHz PCM16 of one received frame).
        self.frames: list[tuple[float, bytes]] = []
        super().__init__(base_url, key, RTCPeerConnection(), "oai-events")

    async def _record(self, track: Any) -> None:
        resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
        while True:
            try:
                frame = await track.recv()
            except Exception:
                return
            for out in resampler.resample(frame):
                self.frames.append((time.monotonic(), np.asarray(out.to_ndarray(), "<i2").tobytes()))

    async def offer(
        self, session: dict[str, Any] | None = None, resume: dict[str, Any] | None = None
    ) -> httpx.Response:
        """Post the offer; ``resume`` (a ``session.resume`` event) takes a session that lost its
        link back as this call (``?session_id=`` and a ``resume`` part)."""
        self.pc.addTrack(self.microphone)
        await self.pc.setLocalDescription(await self.pc.createOffer())
        headers = self._headers()
        sdp = self.pc.localDescription.sdp
        async with httpx.AsyncClient(timeout=30) as http:
            url = f"{self.base_url}{self.calls_path}"
            if session is None and resume is None:
                headers["Content-Type"] = "application/sdp"
                return await http.post(url, content=sdp, headers=headers)
            files = {"sdp": (None, sdp)}
            if session is not None:
                files["session"] = (None, json.dumps(session))
            params = {}
            if resume is not None:
                files["resume"] = (None, json.dumps(resume))
                params["session_id"] = resume["session_id"]
            return await http.post(url, files=files, headers=headers, params=params)

    async def connect(self, session: dict[str, Any] | None = None) -> None:
        await self._answered(await self.offer(session), within=20)

    async def take_back(self, resume: dict[str, Any]) -> None:
        """Call to take back the session that ``resume`` (a ``session.resume`` event) names."""
        await self._answered(await self.offer(resume=resume), within=20)

    def audio_since(self, since: float, until: float | None = None) -> bytes:
        return b"".join(pcm for t, pcm in self.frames if t >= since and (until is None or t <= until))

    def first_loud_after(self, since: float, level: int = 500) -> float | None:
        for t, pcm in self.frames:
            if t >= since and np.abs(np.frombuffer(pcm, "<i2")).max(initial=0) > level:
                return t
        return None


def loudness(pcm: bytes) -> float:
    samples = np.frombuffer(pcm, "<i2").astype(np.float32)
    return float(np.sqrt(np.mean(samples**2))) if samples.size else 0.0
