"""A GPT-Live session's link: the client's connection seen through the GPT-Live dialect.

The transport (``server/realtime/live.py``) reads ``session.start``, admits the session
and wraps its plain link in a ``LiveLink``, which it hands to the engine as any
session's opening link: the engine runs an ordinary voice session, and every
event in and out passes through ``protocol/live/dialect.py``. The link adds
what a sans-IO dialect cannot have, the clock: the output audio goes out as a
gapless real-time stream (``protocol/live/timeline.py``), one frame every
``FRAME_MS``, silence between utterances, each frame sent ``LEAD_MS`` before
it plays; a barge-in (a response cancelled) drops what had not gone out.
What the dialect asks of the session itself (a commentary's response owed
until the one under way ends) joins the client's events: the receiver is woken
for it, so it need not wait for the client's next message.

Over WebRTC (``track=True``) the output audio goes on the call's track, taken
off the wire before it reaches this link (``calls.Call.outgoing``), so there is
no stream to clock: transcript pieces go out as they come, placed at the
session's position; the caller's track audio passes through the dialect (its
mute, its timeline) as a socket's appends do.

GPT-Live has no resume, so a lost socket ends the session (it is never parked),
as ``session.close`` does (``session.closed`` first).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from typing import Any

from livegen.errors import RemoteProtocolError
from livegen.protocol import realtime as wire
from livegen.protocol.live import events as live
from livegen.protocol.live.dialect import LiveDialect, Step, bytes_per_ms
from livegen.protocol.live.timeline import OutputTimeline
from livegen.runtime.voice.lifecycle import Link
from livegen.tasks import TaskSet

#: How far ahead of its play time a frame is sent: the client's jitter buffer, and the room
#: that lets speech made at any moment leave at once.
LEAD_MS = 80


class LiveLink:
    """``inner`` (a ``Link``) speaking GPT-Live; the session's start goes first."""

    def __init__(self, inner: Link, dialect: LiveDialect, start: Step, track: bool = False) -> None:
        self.inner = inner
        #: A WebRTC call: the output audio is on its track, not this link (see above).
        self.track = track
        self.dialect = dialect
        self.timeline = OutputTimeline(bytes_per_ms(dialect.format))
        self._pending: list[str] = [json.dumps(event) for event in start.to_session]
        self._lock = asyncio.Lock()
        self._t0: float | None = None
        #: The pacer's task, owned here: the link's close cancels and awaits it.
        self._tasks = TaskSet()
        self.end_reason: str | None = None
        #: The client's next message, being read (kept across a wake: no message is lost).
        self._reading: asyncio.Task[str | wire.ClientEvent | RemoteProtocolError | int] | None = None
        #: Resolved when the dialect queued events of its own for the session (a future, not a task
        #: per read: the receiver waits on it beside the read; made anew once resolved).
        self._woken: asyncio.Future[None] | None = None

    # --- the session's events, out ------------------------------------------------------
    async def send_text(self, text: str) -> None:
        event: dict[str, Any] = json.loads(text)
        kind = event.get("type")
        if kind == "response.output_audio.delta":
            self.timeline.push_audio(base64.b64decode(event.get("delta") or ""))
        elif kind == "response.output_audio_transcript.delta" and self.track:
            await self._send_transcript(str(event.get("delta") or ""))
        elif kind == "response.output_audio_transcript.delta":
            self.timeline.push_text(str(event.get("delta") or ""))
        elif kind == "response.done":
            status = (event.get("response") or {}).get("status")
            if status == "cancelled":
                self.timeline.clear()  # a barge-in: nothing of the old turn plays after it
            self.timeline.end_response()
            await self._send(self.dialect.usage_event())
        elif kind == "session.closed":
            self.timeline.clear()
        for out in self.dialect.outbound(event):
            await self._send(out)
            if isinstance(out, live.SessionStarted):
                self._start_clock()
        if requests := self.dialect.take_requests():
            self._pending += [json.dumps(request) for request in requests]
            if self._woken is not None and not self._woken.done():
                self._woken.set_result(None)
        await self._pump()

    async def _send(self, event: live.ServerEvent | live.OutputAudioDelta) -> None:
        async with self._lock:
            await self.inner.send_text(live.encode(event))

    async def _send_transcript(self, text: str) -> None:
        """A piece of the answer's transcript, on a call (its speech is on the track)."""
        if text:
            at = self.dialect.input_ms
            event_id = self.dialect.next_event_id()
            await self._send(
                live.OutputTranscriptDelta(event_id=event_id, delta=text, start_ms=at, end_ms=at)
            )

    def _start_clock(self) -> None:
        if self.track:
            return  # the track keeps the output's time
        self._t0 = time.monotonic()
        self._tasks.spawn(self._pace(), name="live-output-pacer")

    async def _pace(self) -> None:
        period = self.timeline.frame_ms / 2000
        with contextlib.suppress(Exception):  # the socket went: the session's end follows
            while True:
                await self._pump()
                await asyncio.sleep(period)

    async def _pump(self) -> None:
        if self._t0 is None:
            return
        now_ms = int((time.monotonic() - self._t0) * 1000)
        for frame in self.timeline.frames(now_ms + LEAD_MS):
            await self._send(frame)

    async def close(self, code: int) -> None:
        await self._tasks.close()
        await self.inner.close(code)

    # --- the client's events, in --------------------------------------------------------
    async def receive(self) -> str | wire.ClientEvent | RemoteProtocolError | int:
        while not self._pending:
            message = await self._next()
            if message is None:
                continue  # woken: the dialect's own events are pending
            if isinstance(message, int):
                return 1000  # GPT-Live has no resume: a lost socket ends the session, never parks it
            if isinstance(message, wire.AudioAppend):  # a call's track: muted and timed as appends
                event: live.ClientEvent = live.InputAudioAppend(audio=message.audio)
            elif not isinstance(message, str):
                return message
            else:
                try:
                    event = live.decode(message)
                except RemoteProtocolError as error:
                    return error
            try:
                step = self.dialect.inbound(event)
            except RemoteProtocolError as error:
                return error  # the session sends it (through ``send_text``) and goes on
            for reply in step.to_client:
                await self._send(reply)
            self._pending += [json.dumps(event) for event in step.to_session]
        return self._pending.pop(0)

    async def _next(self) -> str | wire.ClientEvent | RemoteProtocolError | int | None:
        """The client's next message, or None when the dialect queued events first (the read
        goes on: the next call takes its message)."""
        if self._reading is None:
            self._reading = self._tasks.spawn(self.inner.receive(), name="live-receive")
        if self._woken is None or self._woken.done():
            self._woken = asyncio.get_running_loop().create_future()
        either: set[asyncio.Future[Any]] = {self._reading, self._woken}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if not self._reading.done():
            return None
        reading, self._reading = self._reading, None
        return reading.result()
