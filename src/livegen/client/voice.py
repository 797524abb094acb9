"""A small async client for voice sessions at ``/v1/realtime``: one turn in, one answer out.

It speaks the GA Realtime protocol over plain ``websockets`` (no SDK needed)
and takes turns itself: the session is set to manual turns
(``turn_detection: null``), so a whole recording is one user turn whatever
its pauses, committed and answered with ``response.create``. An ``Answer``
gathers what a user of the turn wants: the answer's audio (PCM16 at
``OUTPUT_RATE``), its transcript, the transcript of what the server heard,
the ``response.done`` status and when the first audio arrived.

An ``error`` event from the server raises ``VoiceError`` carrying its code;
the session itself stays usable, as the protocol promises.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import websockets

#: The answer's audio comes as PCM16 mono at this rate (the Realtime default).
OUTPUT_RATE = 24_000
#: Input is sent in pieces of this many milliseconds, as a microphone would.
APPEND_MS = 100
#: How long to wait after ``response.done`` for the user's transcript, which
#: the server sends when recognition finishes (usually before the answer).
TRANSCRIPT_GRACE_S = 10.0


class VoiceError(Exception):
    """The server answered with an ``error`` event."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code = error.get("code")
        self.error = error


@dataclass
class Answer:
    """One answered turn."""

    #: What the server heard (``None`` for a text turn, or if recognition failed).
    user_transcript: str | None = None
    #: The answer's words, from its audio transcript or text.
    transcript: str = ""
    #: PCM16 mono at ``OUTPUT_RATE``.
    audio: bytes = b""
    #: ``completed``, ``cancelled``, ``incomplete`` or ``failed``.
    status: str = ""
    #: Seconds from the end of the turn (commit or text) to the first answer audio.
    first_audio_s: float | None = None
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def audio_s(self) -> float:
        return len(self.audio) / 2 / OUTPUT_RATE


class VoiceClient:
    """One voice session. ``await VoiceClient.connect(url)``, then ``ask_audio``/``ask_text``."""

    def __init__(self, connection: Any) -> None:
        self._ws = connection
        self.session: dict[str, Any] = {}

    @classmethod
    async def connect(
        cls, url: str, *, api_key: str | None = None, model: str | None = None, **session: Any
    ) -> VoiceClient:
        """Open a session at ``url`` (``ws://host:port``, the path is added) in manual-turn mode."""
        query = f"?{urlencode({'model': model})}" if model else ""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        connection = await websockets.connect(
            f"{url.rstrip('/')}/v1/realtime{query}", additional_headers=headers, max_size=None
        )
        client = cls(connection)
        created = await client._next()
        if created.get("type") == "error":
            await connection.close()
            raise VoiceError(created["error"])
        client.session = created.get("session", {})
        await client.update(**session)
        return client

    async def update(self, **session: Any) -> dict[str, Any]:
        """``session.update`` with manual turns and PCM16 output, plus ``session``'s fields."""
        audio = session.pop("audio", {})
        audio.setdefault("input", {}).setdefault("turn_detection", None)
        audio.setdefault("output", {}).setdefault("format", {"type": "audio/pcm", "rate": OUTPUT_RATE})
        await self._send(
            {"type": "session.update", "session": {"type": "realtime", "audio": audio, **session}}
        )
        updated = await self._until("session.updated")
        self.session = updated[-1]["session"]
        return self.session

    async def ask_audio(self, pcm: bytes, rate: int) -> Answer:
        """Send ``pcm`` (PCM16 mono at ``rate``) as one turn and return the answer."""
        if rate != self._input_rate():
            await self.update(audio={"input": {"format": {"type": "audio/pcm", "rate": rate}}})
        step = rate * APPEND_MS // 1000 * 2
        for start in range(0, len(pcm), step):
            piece = base64.b64encode(pcm[start : start + step]).decode()
            await self._send({"type": "input_audio_buffer.append", "audio": piece})
        await self._send({"type": "input_audio_buffer.commit"})
        return await self._answer(expect_transcript=True)

    async def ask_text(self, text: str) -> Answer:
        """Add ``text`` as the user's message and return the answer."""
        content = [{"type": "input_text", "text": text}]
        item = {"type": "message", "role": "user", "content": content}
        await self._send({"type": "conversation.item.create", "item": item})
        return await self._answer(expect_transcript=False)

    async def close(self) -> None:
        await self._ws.close()

    async def __aenter__(self) -> VoiceClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _answer(self, expect_transcript: bool) -> Answer:
        turn_end = time.monotonic()
        await self._send({"type": "response.create"})
        answer = Answer()
        chunks: list[bytes] = []
        done = False
        while not done or (expect_transcript and answer.user_transcript is None):
            try:
                event = await self._next(TRANSCRIPT_GRACE_S if done else None)
            except TimeoutError:
                break
            answer.events.append(event)
            done = done or _fold(event, answer, chunks, turn_end)
        answer.audio = b"".join(chunks)
        return answer

    def _input_rate(self) -> int:
        fmt = self.session.get("audio", {}).get("input", {}).get("format") or {}
        return int(fmt.get("rate", OUTPUT_RATE)) if fmt.get("type", "audio/pcm") == "audio/pcm" else 0

    async def _send(self, event: dict[str, Any]) -> None:
        await self._ws.send(json.dumps(event))

    async def _next(self, within: float | None = None) -> dict[str, Any]:
        async with asyncio.timeout(within):
            message = await self._ws.recv()
        event: dict[str, Any] = json.loads(message)
        return event

    async def _until(self, kind: str) -> list[dict[str, Any]]:
        events = []
        while True:
            event = await self._next()
            events.append(event)
            if event["type"] == "error":
                raise VoiceError(event["error"])
            if event["type"] == kind:
                return events


def _fold(event: dict[str, Any], answer: Answer, chunks: list[bytes], turn_end: float) -> bool:
    """Fold one server event into ``answer``; True at ``response.done``."""
    kind = event["type"]
    if kind == "error":
        raise VoiceError(event["error"])
    if kind == "response.output_audio.delta":
        if answer.first_audio_s is None:
            answer.first_audio_s = time.monotonic() - turn_end
        chunks.append(base64.b64decode(event["delta"]))
    elif kind in ("response.output_audio_transcript.delta", "response.output_text.delta"):
        answer.transcript += event["delta"]
    elif kind == "conversation.item.input_audio_transcription.completed":
        answer.user_transcript = event["transcript"]
    elif kind == "response.done":
        answer.status = event["response"]["status"]
        return True
    return False
