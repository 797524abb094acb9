"""The user's turn as a cascade stream has heard it so far: its audio, its settled parts, the
speculation at its last pause.

``stream.Stream`` detects the turns and decides when to transcribe; this module
owns what one turn is made of until it is committed or cleared: the
uncommitted input (16 kHz PCM16, positions counted in samples since the
session started), whether it holds speech, the transcripts of the parts
already settled (a long turn is transcribed piece by piece while it is
spoken), and the ``Speculation`` started at a pause: a transcript and maybe a
prepared answer, kept if the turn ends there, dropped (its transcript settled
when it covers ``SETTLE_S``) if the user goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from livegen.models.cascade import replies, transcripts
from livegen.models.cascade.answering import drop_prepared
from livegen.models.cascade.vad import SAMPLE_RATE

#: A partial transcript taken at a pause is kept if the user goes on and it covers this much audio.
SETTLE_S = 2.0
#: Audio kept after the last speech frame when transcribing, so a trailing consonant is not cut.
_TAIL_S = 0.25


class Counts(Protocol):
    """The model's counters this module moves (``model.Stats``)."""

    num_settled: int
    num_speculation_hits: int


@dataclass
class Speculation:
    """Work started at a pause, on the input from ``start`` to ``end`` (samples)."""

    start: int
    end: int
    transcript: asyncio.Task[str]
    prepared: asyncio.Task[replies.Answer] | None


class Turn:
    """The uncommitted input, samples [``start``, ``end``), and what has been made of it."""

    def __init__(self, captions: transcripts.Transcripts, stats: Counts) -> None:
        self._captions = captions
        self._stats = stats
        self._pcm = bytearray()
        self.start = 0
        #: Whether the input holds speech (so a commit has something to transcribe).
        self.has_speech = False
        #: Transcripts of the settled parts of the turn, in order, and where they end.
        self.settled: list[asyncio.Task[str]] = []
        self.settled_until = 0
        self.speculation: Speculation | None = None

    @property
    def end(self) -> int:
        return self.start + len(self._pcm) // 2

    def extend(self, pcm: bytes) -> None:
        self._pcm += pcm

    def audio(self, start: int, end: int) -> np.ndarray:
        """The input from ``start`` to ``end`` (samples), as floats."""
        begin = max(0, start - self.start) * 2
        stop = max(0, end - self.start) * 2
        return np.frombuffer(bytes(self._pcm[begin:stop]), "<i2").astype(np.float32) / 32768.0

    def speech_started(self, sample: int) -> None:
        start = max(sample, self.start)
        if self.speculation is not None:  # a new segment before the commit: the user went on
            self.drop_speculation(keep_transcript=True)
        elif not self.has_speech:
            self.settled_until = start
            self._captions.turn_start = start
        self.has_speech = True

    def drop_speculation(self, keep_transcript: bool) -> None:
        speculation, self.speculation = self.speculation, None
        if speculation is None:
            return
        drop_prepared(speculation.prepared)
        if keep_transcript and speculation.end - speculation.start >= SETTLE_S * SAMPLE_RATE:
            self.settled.append(speculation.transcript)
            self.settled_until = speculation.end
            self._stats.num_settled += 1
        else:
            speculation.transcript.cancel()

    def take(
        self,
        last_speech: int,
        spawn: Callable[[Coroutine[Any, Any, str]], asyncio.Task[str]],
        transcribe: Callable[[np.ndarray], Coroutine[Any, Any, str]],
    ) -> tuple[asyncio.Task[str], asyncio.Task[replies.Answer] | None]:
        """The transcript of the unsettled rest of the turn, and an answer if one was prepared."""
        speculation = self.speculation
        if (
            speculation is not None
            and speculation.start == self.settled_until
            and last_speech <= speculation.end
        ):
            self.speculation = None
            self._stats.num_speculation_hits += 1
            return speculation.transcript, speculation.prepared
        self.drop_speculation(keep_transcript=False)
        if not self.has_speech:
            return spawn(_constant("")), None
        end = min(self.end, last_speech + int(_TAIL_S * SAMPLE_RATE))
        return spawn(transcribe(self.audio(self.settled_until, end))), None

    async def heard_at(self, sample: int) -> str | None:
        """The turn's words up to the pause at ``sample``, from the transcript started at it
        (the speculation); None when there is none (not speculative) or it failed."""
        speculation = self.speculation
        if speculation is None or speculation.end < sample:
            return None
        parts = [*self.settled, speculation.transcript]
        await asyncio.wait(parts)  # a dropped speculation is cancelled: the verdict is stale then
        if any(part.cancelled() or part.exception() is not None for part in parts):
            return None
        return " ".join(part.result() for part in parts)

    def reset(self, is_speaking: bool) -> None:
        """A new turn from the end of the input (committed or cleared); ``is_speaking``: a commit
        in the middle of speech, whose rest belongs to the next item."""
        self.start = self.end
        self._pcm.clear()
        self.settled = []
        self.settled_until = self.start
        self._captions.new_turn(self.start)
        self.has_speech = is_speaking

    def drop_leading_silence(self, keep_bytes: int, is_held: bool) -> None:
        """Between turns, keep only ``keep_bytes`` (the prefix padding): silence is never transcribed."""
        if self.has_speech or self.speculation is not None or is_held:
            return
        if len(self._pcm) > 2 * keep_bytes:
            excess = len(self._pcm) - keep_bytes
            del self._pcm[:excess]
            self.start += excess // 2
            self.settled_until = self.start


async def _constant(text: str) -> str:
    return text
