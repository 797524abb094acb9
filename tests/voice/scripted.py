"""A scripted voice model for tests: real asyncio streams, scripted answers.

It keeps the contract of ``models/voice.py`` honestly (epoch tags, outputs in
order, ``aclose`` ends ``outputs()``) and records what reached it, so tests
can check wire order and the fence. It transcribes a commit as the number of
milliseconds it heard, and answers ``respond`` with text and a tone. Never
registered in CATALOG: tests build their own registry (``registry()``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from livegen.models import Kind, ModelInfo, Registry
from livegen.models.voice import ModelHealth, OutputKind, ResponseRequest, StreamConfig, VoiceOutput


def tone(ms: int, rate: int, hz: float = 440.0) -> bytes:
    t = np.arange(rate * ms // 1000) / rate
    return (np.sin(2 * np.pi * hz * t) * 8000).astype("<i2").tobytes()


@dataclass
class Script:
    #: Audio per response, in chunks of ``chunk_ms``.
    reply_ms: int = 600
    chunk_ms: int = 100
    words: tuple[str, ...] = ("hello ", "from ", "livegen")
    #: Seconds between chunks (0: as fast as possible, faster than real time).
    delay_s: float = 0.0
    #: Raise on this many next appends.
    num_failing_appends: int = 0
    #: Keep talking after a cancel (a slow model): the session's fence must drop it.
    is_deaf_to_cancel: bool = False


@dataclass
class Stream:
    model: ScriptedVoice
    session_id: str
    config: StreamConfig
    received: list[tuple[int, int]] = field(default_factory=list)  # (epoch, bytes) per append
    calls: list[str] = field(default_factory=list)
    uncommitted_bytes: int = 0

    def __post_init__(self) -> None:
        self.queue: asyncio.Queue[VoiceOutput | None] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    async def append(self, epoch: int, pcm: bytes) -> None:
        if self.model.script.num_failing_appends > 0:
            self.model.script.num_failing_appends -= 1
            raise RuntimeError("scripted append failure")
        self.received.append((epoch, len(pcm)))
        self.calls.append("append")
        self.uncommitted_bytes += len(pcm)

    async def commit(self, epoch: int, item_id: str) -> None:
        self.calls.append("commit")
        heard_ms = self.uncommitted_bytes * 500 // self.model.input_rate
        self.uncommitted_bytes = 0
        await self.queue.put(
            VoiceOutput(OutputKind.TRANSCRIPT_DONE, epoch, item_id=item_id, text=f"{heard_ms} ms")
        )

    async def clear(self, epoch: int) -> None:
        self.calls.append("clear")
        self.uncommitted_bytes = 0

    async def respond(self, epoch: int, request: ResponseRequest) -> None:
        self.calls.append("respond")
        self.task = asyncio.create_task(self._speak(epoch, request))

    async def _speak(self, epoch: int, request: ResponseRequest) -> None:
        script = self.model.script
        put = self.queue.put
        for word in script.words:
            await put(VoiceOutput(OutputKind.TEXT_DELTA, epoch, response_id=request.response_id, text=word))
        for _ in range(script.reply_ms // script.chunk_ms):
            chunk = tone(script.chunk_ms, self.model.output_rate)
            await put(
                VoiceOutput(OutputKind.AUDIO_DELTA, epoch, response_id=request.response_id, audio=chunk)
            )
            await asyncio.sleep(script.delay_s)
        await put(
            VoiceOutput(OutputKind.RESPONSE_DONE, epoch, response_id=request.response_id, status="completed")
        )

    async def cancel(self, epoch: int) -> None:
        self.calls.append("cancel")
        if self.task is not None and not self.model.script.is_deaf_to_cancel:
            self.task.cancel()

    async def update(self, config: StreamConfig) -> None:
        self.config = config

    async def outputs(self) -> AsyncIterator[VoiceOutput]:
        while (output := await self.queue.get()) is not None:
            yield output

    async def aclose(self) -> None:
        self.calls.append("aclose")
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.queue.put(None)


class ScriptedVoice:
    name = "scripted-voice"
    input_rate = 16_000
    output_rate = 24_000
    has_vad = False

    def __init__(self) -> None:
        self.script = Script()
        self.streams: list[Stream] = []

    async def open(self, session_id: str, config: StreamConfig) -> Stream:
        stream = Stream(self, session_id, config)
        self.streams.append(stream)
        return stream

    def health(self) -> ModelHealth:
        return ModelHealth()


def load() -> ScriptedVoice:
    return ScriptedVoice()


class Scripted8k(ScriptedVoice):
    """A second scripted model at other rates, to switch to."""

    name = "scripted-8k"
    input_rate = 8_000
    output_rate = 8_000


def load_8k() -> Scripted8k:
    return Scripted8k()


def registry() -> Registry:
    return Registry(
        [
            ModelInfo(
                "scripted-voice",
                Kind.VOICE,
                "voice.scripted:load",
                "a scripted test double",
                aliases=("alias",),
            ),
            ModelInfo("scripted-8k", Kind.VOICE, "voice.scripted:load_8k", "a scripted test double at 8 kHz"),
        ]
    )


class SlowLoadingVoice(ScriptedVoice):
    """Loads only once ``release`` is set, to see the service report it is not ready yet."""

    release: ClassVar[threading.Event] = threading.Event()

    def __init__(self) -> None:
        super().__init__()
        if not self.release.wait(timeout=30):
            raise RuntimeError("never released")


def load_slow() -> SlowLoadingVoice:
    return SlowLoadingVoice()


def slow_registry() -> Registry:
    return Registry(
        [ModelInfo("slow-voice", Kind.VOICE, "voice.scripted:load_slow", "a slow-loading double")]
    )
