"""One session's transcripts of the user's turns: live captions while a turn is spoken, then the
completed transcript, which continues what the captions sent, with its logprobs when asked.

``stream.Stream`` owns the turns and when each happens (``turn.Turn`` the audio); this
module owns what the client reads of the user's words. The two halves share
one promise: the captions send a prefix that never changes (``captions``
local agreement), and the completed transcript is that prefix plus the
rest, so the deltas always add up to ``.completed``. If the whole turn is
heard differently, it is decoded again from what was sent rather than taking
words back. Live decodes are ``Priority.CAPTION`` (the recognition queue may
drop them under load); the completed transcript never is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

import numpy as np

from livegen.errors import StageUnavailable
from livegen.models.cascade import asr, captions, vad
from livegen.models.cascade.asr_batch import Priority
from livegen.models.voice import OutputKind

logger = logging.getLogger("livegen.models.cascade")

SAMPLE_RATE = vad.SAMPLE_RATE

#: The turn's audio between two sample positions, as 16 kHz float.
AudioOf = Callable[[int, int], np.ndarray]
#: What the captions sent of a turn, and the turn's audio to decode again from there.
Caption = tuple[captions.Agreement, np.ndarray]


class Transcribe(Protocol):
    def __call__(
        self, audio: np.ndarray, prefix: str = "", priority: Priority = Priority.FINAL
    ) -> Awaitable[str]: ...


class Transcripts:
    """Live captions of the turn being spoken (one decode in flight), and completed transcripts."""

    def __init__(
        self,
        transcribe: Transcribe,
        score: Callable[[np.ndarray, str], Awaitable[list[asr.Logprob]]],
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
        emit: Callable[..., None],
    ) -> None:
        self._transcribe, self._score, self._spawn, self._emit = transcribe, score, spawn, emit
        #: Where the turn being spoken starts, what its captions sent, and where the last decode ended.
        self.turn_start = 0
        self._agreement: captions.Agreement | None = None
        self._decoded_to = 0
        self._decoding: asyncio.Task[None] | None = None

    def new_turn(self, start: int) -> None:
        """The turn was committed (or cleared): the next one starts at ``start``."""
        self.turn_start = self._decoded_to = start
        self._agreement = None
        self.stop()

    def stop(self) -> None:
        """The user stopped speaking: a caption decoded now would reach the session after it
        committed the turn, with no item to name; the completed transcript brings those words."""
        if self._decoding is not None:
            self._decoding.cancel()

    def caption(self, epoch: int, end: int, audio_of: AudioOf, step_s: float = captions.STEP_S) -> None:
        """Decode the turn up to ``end`` once ``step_s`` of new speech came since the last
        decode, one decode at a time (the caller says whether the session wants captions now)."""
        if self._decoding is not None and not self._decoding.done():
            return
        if end - self._decoded_to < step_s * SAMPLE_RATE:
            return
        if end - self.turn_start > captions.MAX_LIVE_S * SAMPLE_RATE:
            return
        self._agreement = self._agreement or captions.Agreement()
        self._decoded_to = end
        self._decoding = self._spawn(self._decode(epoch, self._agreement, audio_of(self.turn_start, end)))

    async def _decode(self, epoch: int, agreement: captions.Agreement, audio: np.ndarray) -> None:
        text = await self._transcribe(audio, priority=Priority.CAPTION)  # may be dropped under load
        if agreement is self._agreement and (delta := agreement.feed(text)):
            self._emit(OutputKind.TRANSCRIPT_DELTA, epoch, text=delta)

    def of_turn(self, end: int, audio_of: AudioOf) -> Caption | None:
        """What the captions sent of the turn being committed (up to ``end``), and its audio to
        decode again from there should the completed transcript not start with it."""
        agreement = self._agreement
        if agreement is None or not agreement.sent:
            return None
        audio = audio_of(self.turn_start, end)
        return (agreement, audio) if len(audio) <= asr.WINDOWS_S[-1] * SAMPLE_RATE else None

    async def complete(
        self,
        epoch: int,
        item_id: str,
        parts: list[asyncio.Task[str]],
        caption: Caption | None = None,
        heard: np.ndarray | None = None,
    ) -> str:
        """The turn's transcript from its parts, sent as the rest after the captions and then as
        ``.completed`` (with logprobs scored against ``heard`` when given); "" if it failed."""
        try:
            words = [await asyncio.shield(task) for task in parts]
            text = " ".join(word for word in words if word)
            rest = text if caption is None else caption[0].rest(text)
            if caption is not None and rest is None:
                # Heard differently as a whole: decode the turn again from what the captions sent,
                # which never changes, so that the deltas add up to the completed transcript.
                text = await self._transcribe(caption[1], prefix=caption[0].text)
                rest = caption[0].rest(text)
            if caption is not None and rest is not None:
                text = caption[0].text + rest  # the words as sent, where only punctuation differed
        except StageUnavailable as exc:  # a remote recogniser: the turn's response fails with its code
            logger.warning("transcription of %s failed: %s", item_id, exc)
            self._emit(OutputKind.ERROR, epoch, item_id=item_id, text=f"transcription failed: {exc}")
            raise
        except Exception as exc:
            logger.exception("transcription of %s failed", item_id)
            self._emit(OutputKind.ERROR, epoch, item_id=item_id, text=f"transcription failed: {exc}")
            return ""
        if rest:
            self._emit(OutputKind.TRANSCRIPT_DELTA, epoch, item_id=item_id, text=rest)
        logprobs = None if heard is None else await self._logprobs(heard, text)
        self._emit(OutputKind.TRANSCRIPT_DONE, epoch, item_id=item_id, text=text, logprobs=logprobs)
        return text

    async def _logprobs(self, audio: np.ndarray, text: str) -> tuple[dict[str, object], ...]:
        """``text``'s tokens scored against the turn's audio (its first 30 s); none if that fails."""
        try:
            scored = await self._score(audio, text)
        except Exception:
            logger.exception("scoring a transcript's tokens failed")
            return ()
        return tuple(entry.to_wire() for entry in scored)
