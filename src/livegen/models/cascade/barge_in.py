"""Whether speech over a playing answer is a real barge-in, or a cough, a click, a "mm-hmm".

The check costs a real interruption 0.3-1.3 s, so it is opt-in (``is_wanted``):
a session that asks for ``noise_reduction`` or ``semantic_vad`` (the mode
chosen for fewer interruptions) gets it; any other session barges in at the
first speech frame over an answer, as it always did (about 0.1 s).

While an answer plays, ``Gate.hold`` sets ``vad.Turns.min_speech_ms``: a new
segment is held back, with no speech start (so the session neither barges in
nor opens a turn), until it has ``MAX_HOLD_MS`` of speech. A sound that ends
before that is dropped. Waiting that long for every barge-in would make
"Stop." too slow, and a word that short is as long as a "mm-hmm" (Silero finds
450 ms of speech in espeak's "Stop." and 640 ms in its "mm-hmm"), so length
alone cannot tell them apart. The recogniser can, mostly: once the held
segment has ``CHECK_MS`` of speech, and again every ``CHECK_MS`` more, ``Gate``
transcribes it, and words that are not a backchannel release it at once if
Whisper is sure of them. Sure matters: on a hum, Whisper tiny.en writes words
("and", "Amen.", "in a", "down.") with a mean token log probability of -1.1
to -3.0, where the first words of real speech mostly score -0.3 to -0.8
(``MIN_MEAN_LOGPROB``; which words a check hears depends on where it cuts).
Words that stop a speaker ("stop", "wait", "no": ``COMMANDS``) release it
whatever their score: Whisper is unsure of a lone "Stop." heard after 288 ms
(-1.8), and junk on a hum is rarely one of them. A sound that ends between
two checks ("what time is it" is under 800 ms of speech, and Whisper may be
unsure of its first 288 ms) is checked once more, whole, after ``END_MS`` of
silence, with a lower bar (``MIN_MEAN_LOGPROB_WHOLE``: Whisper's junk on a
whole hum scored -1.7 to -2.4); the detector keeps it past
``vad.HOLD_GAP_MS`` until that verdict (``Gate.is_deciding``): on a busy
machine a decode may take longer than the gap, and a real barge-in dropped
while its check ran was lost.

So real speech barges in after about ``CHECK_MS`` of speech and one short
decode, noise never does, and a backchannel does only if it goes on for
``MAX_HOLD_MS``. ``livegen bench voice-barge-in`` measures all three.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Coroutine
from typing import Any

import numpy as np

from livegen.models.cascade import asr, vad
from livegen.models.voice import StreamConfig

#: The client plays an answer's audio a little after it is sent (its jitter buffer, the network).
PLAYBACK_SLACK_S = 0.5
#: While an answer plays, a segment with this much speech starts whatever it says.
MAX_HOLD_MS = 800
#: The recogniser looks at a held segment each time it has this much more speech.
CHECK_MS = 288
#: A held sound silent this long has ended: it is checked whole, if it has ``MIN_WORD_MS`` of speech.
END_MS = 96
MIN_WORD_MS = 160
#: Words over an answer barge in only if their tokens' mean log probability is at least this.
MIN_MEAN_LOGPROB = -1.0
#: ... and a sound heard whole, once it ended.
MIN_MEAN_LOGPROB_WHOLE = -1.5
#: Words that acknowledge without taking the turn (what Whisper writes for them, lower case).
BACKCHANNELS = frozenset(
    [
        "m",
        "mm",
        "mmm",
        "mhm",
        "hmm",
        "hm",
        "mm-hmm",
        "mm-hm",
        "uh-huh",
        "uh-uh",
        "uh-oh",
        "uh",
        "huh",
        "um",
        "ah",
        "oh",
        "yeah",
        "yep",
        "yes",
        "okay",
        "ok",
        "right",
        "sure",
    ]
)
#: Words that stop a speaker: heard over an answer, they barge in however unsure Whisper is.
COMMANDS = frozenset(["stop", "wait", "no", "cancel", "pause", "quiet", "hold", "hang"])
logger = logging.getLogger("livegen.models.cascade")
_WORD = re.compile(r"[a-z]+(?:-[a-z]+)*")
#: Whisper's way of naming a sound that is not speech: "(coughs)", "[MUSIC]", "*sighs*".
_SOUND = re.compile(r"\([^)]*\)|\[[^\]]*\]|\*[^*]*\*")


def is_wanted(config: StreamConfig) -> bool:
    """Whether the session opted in to the gate: noise reduction on, or ``semantic_vad``."""
    detection = config.turn_detection
    return bool(config.noise_reduction) or (detection is not None and detection.eagerness is not None)


def is_backchannel(text: str) -> bool:
    """``text`` is only backchannel words, sound labels or nothing.

    Whisper writes a long hum as a stutter of one ("Mm-mm-mm-mm-", "Mm-m-m-m-",
    "Mm-huh."): a hyphenated word made only of backchannels is one too.
    """
    words = _WORD.findall(_SOUND.sub(" ", text.lower()))
    return all(word in BACKCHANNELS or set(word.split("-")) <= BACKCHANNELS for word in words)


class Gate:
    """One session's recogniser check of the segment held while an answer plays.

    ``hold`` runs before each append is fed and ``step`` after it; a check
    that finds words sets a verdict that ``take`` hands to the next append,
    which releases the held segment (so the detector is only ever touched by
    appends, one at a time).
    """

    def __init__(
        self,
        transcribe: Callable[[np.ndarray], Coroutine[Any, Any, str]],
        score: Callable[[np.ndarray, str], Coroutine[Any, Any, list[asr.Logprob]]],
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
    ) -> None:
        self._transcribe = transcribe
        self._score = score
        self._spawn = spawn
        #: The held segment being checked (its first sample), how much speech the last check saw.
        self._segment: int | None = None
        self._checked_ms = 0
        self._task: asyncio.Task[None] | None = None
        self._is_speech = False
        #: Whether the session opted in (``is_wanted``); until when its answer plays (loop time).
        self.is_on = False
        self.playing_until = 0.0

    def playing(self, until: float) -> None:
        """The answer's audio sent so far plays until ``until`` (loop time), and a little after."""
        self.playing_until = until + PLAYBACK_SLACK_S

    def hold(self, turns: vad.Turns, now: float) -> list[vad.Turn]:
        """Before an append is fed: hold new speech back while an answer plays (if the session
        opted in); the held segment's start, if a check heard words in it."""
        turns.min_speech_ms = MAX_HOLD_MS if self.is_on and now < self.playing_until else 0
        turns.keep_held = self.is_deciding(turns)
        return turns.release() if self.take(turns) else []

    def is_deciding(self, turns: vad.Turns) -> bool:
        """Whether the segment ``turns`` holds still awaits a verdict: a check of it is running, or
        its whole check (``MIN_WORD_MS`` of speech or more, not all of it checked) is yet to run.
        The detector keeps it meanwhile, however long a busy machine's decode takes."""
        held = turns.held
        if held is None:
            return False
        is_running = self._task is not None and not self._task.done()
        if is_running and held[0] == self._segment:
            return True
        voiced_ms = held[1] * 1000 // vad.SAMPLE_RATE
        checked_ms = self._checked_ms if held[0] == self._segment else 0
        return voiced_ms >= MIN_WORD_MS and voiced_ms > checked_ms

    def take(self, turns: vad.Turns) -> bool:
        """Whether the segment ``turns`` holds was found to be speech; forgets the verdict."""
        held = turns.held
        is_speech = self._is_speech and held is not None and held[0] == self._segment
        self._is_speech = False
        return is_speech

    def step(self, turns: vad.Turns, audio: Callable[[int], np.ndarray]) -> None:
        """Check the held segment (``audio(start)``: the input from ``start`` on) when it has grown."""
        held = turns.held
        if held is None:
            self._segment = None
            return
        first, voiced, last = held
        voiced_ms = voiced * 1000 // vad.SAMPLE_RATE
        if first != self._segment:
            self._segment, self._checked_ms, self._is_speech = first, 0, False
        if self._task is not None and not self._task.done():
            return
        has_ended = (turns.position - last) * 1000 >= END_MS * vad.SAMPLE_RATE
        is_new_end = has_ended and voiced_ms > self._checked_ms and voiced_ms >= MIN_WORD_MS
        if voiced_ms < self._checked_ms + CHECK_MS and not is_new_end:
            return
        self._checked_ms = voiced_ms
        bar = MIN_MEAN_LOGPROB_WHOLE if has_ended else MIN_MEAN_LOGPROB
        self._task = self._spawn(self._check(first, audio(first), bar))

    async def _check(self, segment: int, audio: np.ndarray, bar: float) -> None:
        text = await self._transcribe(audio)
        logger.debug("barge-in check over an answer heard %r", text)
        if segment != self._segment or is_backchannel(text):
            return
        if COMMANDS.intersection(_WORD.findall(text.lower())):
            self._is_speech = True
            return
        scored = await self._score(audio, text)
        logger.debug("barge-in check: mean token logprob %.2f, bar %.2f", _mean(scored), bar)
        if scored and _mean(scored) >= bar:
            self._is_speech = segment == self._segment


def _mean(scored: list[asr.Logprob]) -> float:
    return sum(t.logprob for t in scored) / len(scored) if scored else float("-inf")
