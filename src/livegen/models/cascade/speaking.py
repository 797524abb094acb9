"""An answer's speech: pieces synthesised a little ahead of real time, sent as audio deltas.

``answering.Answering`` speaks each answer through these (``voicing``): a producer asks the
speech workers for a piece's audio only while the answer is less than
``MAX_AHEAD_S`` ahead of real time (``Pacing``), so a long answer does not take
a core for all its length at once, and a barge-in wastes less. The stream
keeps what is a session's (the epoch, the outputs, the barge-in gate); this
module keeps what is the same for every answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

from livegen.models.cascade import replies
from livegen.models.cascade.speech_jobs import Speech
from livegen.models.cascade.tts import SynthesisError

logger = logging.getLogger("livegen.models.cascade")

#: Output audio is sent in pieces of this length (24 kHz PCM16).
AUDIO_DELTA_BYTES = 24_000 * 2 // 5
#: A response's audio is synthesised at most this far ahead of real time: a long answer then
#: costs a core for a second in every ten, not for all its length at once, and other sessions
#: keep the CPU they need to start theirs (and barge-in wastes less).
MAX_AHEAD_S = 10.0


@dataclass
class Pacing:
    """How far a response's audio is ahead of real time (playback starts with its first audio)."""

    started: float = 0.0
    emitted_s: float = 0.0

    def add(self, now: float, seconds: float) -> None:
        if not self.emitted_s:
            self.started = now
        self.emitted_s += seconds

    def excess_s(self, now: float) -> float:
        """How long to wait before asking for more audio."""
        return self.emitted_s - (now - self.started) - MAX_AHEAD_S if self.emitted_s else 0.0

    async def wait(self) -> None:
        """Until the audio so far is less than ``MAX_AHEAD_S`` ahead (more may come meanwhile)."""
        loop = asyncio.get_running_loop()
        excess = self.excess_s(loop.time())
        while excess > 0:
            await asyncio.sleep(excess)
            excess = self.excess_s(loop.time())


async def synthesise(
    pieces: AsyncIterator[replies.Piece],
    wants_audio: bool,
    voice: str,
    queue: asyncio.Queue[replies.Piece | None],
    pacing: Pacing,
    say: replies.Speak,
) -> None:
    """Feed ``queue`` with pieces and their audio in flight; None at the end, even after an error.

    Audio is asked for only while the response is less than ``MAX_AHEAD_S`` ahead of real time.
    """
    error: Exception | None = None
    try:
        async for text, prepared_audio in pieces:
            audio = prepared_audio
            if not wants_audio and audio is not None:
                audio.cancel()
                audio = None
            elif wants_audio and audio is None:
                await pacing.wait()
                audio = say(text, voice)
            try:
                await queue.put((text, audio))
            except asyncio.CancelledError:
                if audio is not None:
                    audio.cancel()
                raise
    except Exception as exc:
        error = exc
    await queue.put(None)
    if error is not None:
        raise error


async def speech_of(audio: concurrent.futures.Future[Speech], text: str, say: replies.Speak) -> Speech:
    """A piece's synthesised speech; espeak-ng's, at once, where Piper could not say it."""
    try:
        return await asyncio.wrap_future(audio)
    except SynthesisError as exc:
        logger.warning("speech synthesis failed, falling back to espeak-ng: %s", exc)
        return await asyncio.wrap_future(say(text, "espeak"))


def audio_deltas(pcm: bytes) -> Iterator[bytes]:
    """``pcm`` in the pieces the wire carries (``AUDIO_DELTA_BYTES``)."""
    for start in range(0, len(pcm), AUDIO_DELTA_BYTES):
        yield pcm[start : start + AUDIO_DELTA_BYTES]
