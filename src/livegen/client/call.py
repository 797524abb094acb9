"""What every aiortc caller of livegen's call routes shares: the peer, the data channel's events, the
answer, hangup and close. ``webrtc.Caller`` (a voice call) and ``world_call.WorldCaller`` (a world
call) add their own media: a microphone and the answer's audio, or the world's video frames.

One base class rather than two copies: both routes answer an offer with ``201``, the SDP answer
and ``Location: .../calls/{call_id}``, carry JSON events on a data channel, and hang up at
``.../calls/{call_id}/hangup``; only the route's path and the media differ.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import httpx
from aiortc import RTCPeerConnection, RTCSessionDescription


class CallPeer:
    """A call's peer: ``events`` as they came on the channel, ``send``, ``wait_for``, ``hangup``.
    A subclass sets ``calls_path`` and records the media of each track in ``_record``."""

    #: The route the offer is posted to (``/v1/realtime/calls``, ``/v1/worlds/calls``).
    calls_path = ""

    def __init__(self, base_url: str, key: str | None, pc: RTCPeerConnection, label: str) -> None:
        self.base_url = base_url
        self.key = key
        self.pc = pc
        self.events: list[dict[str, Any]] = []
        #: id(event) -> monotonic time it arrived.
        self.event_times: dict[int, float] = {}
        self.new_event = asyncio.Event()
        self.call_id: str | None = None
        self.channel = pc.createDataChannel(label)
        self.channel.on("message", self._on_message)
        self.opened = asyncio.Event()
        self.channel.on("open", self.opened.set)
        self._tasks: list[asyncio.Task[None]] = []

        @pc.on("track")
        def on_track(track: Any) -> None:
            self._tasks.append(asyncio.ensure_future(self._record(track)))

    async def _record(self, track: Any) -> None:
        raise NotImplementedError

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    def _on_message(self, message: str) -> None:
        event = json.loads(message)
        self.event_times[id(event)] = time.monotonic()
        self.events.append(event)
        self.new_event.set()

    async def _answered(self, response: httpx.Response, within: float) -> None:
        """Take the server's answer to the offer and wait for the channel to open."""
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

    async def hangup(self) -> httpx.Response:
        async with httpx.AsyncClient(timeout=10) as http:
            url = f"{self.base_url}{self.calls_path}/{self.call_id}/hangup"
            return await http.post(url, headers=self._headers())

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await self.pc.close()
