"""Barge-in over a playing answer: the detector's hold, and what counts as a backchannel.

Pure parts only (``vad.Turns`` fed probabilities, ``barge_in.is_backchannel``);
the whole path, spoken audio over a real server's answer, is in
``test_hearing_e2e.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from livegen.models.cascade import asr, barge_in, vad
from livegen.models.voice import TurnDetection


def feed(turns: vad.Turns, pattern: str) -> list[vad.Turn]:
    """One 32 ms frame per character: ``#`` speech, ``.`` silence."""
    events: list[vad.Turn] = []
    for mark in pattern:
        events += turns.feed(0.9 if mark == "#" else 0.05)
    return events


def test_a_short_sound_over_an_answer_starts_nothing_and_is_forgotten() -> None:
    turns = vad.Turns(TurnDetection())
    turns.min_speech_ms = barge_in.MAX_HOLD_MS
    assert feed(turns, "...########" + "." * 20) == []  # 256 ms of "speech", then 640 ms of silence
    assert turns.held is None and not turns.is_speaking
    # Without the hold, the same sound starts a segment at its first frame.
    assert [t.event for t in feed(vad.Turns(TurnDetection()), "...########")] == [vad.Event.SPEECH_STARTED]


def test_held_speech_starts_from_its_first_frame_once_long_enough_or_released() -> None:
    settings = TurnDetection(prefix_padding_ms=0)
    turns = vad.Turns(settings)
    turns.min_speech_ms = barge_in.MAX_HOLD_MS
    frames = barge_in.MAX_HOLD_MS // vad.FRAME_MS
    events = feed(turns, "..." + "#" * frames)
    assert events == [vad.Turn(vad.Event.SPEECH_STARTED, 3 * vad.FRAME_SAMPLES)]
    released = vad.Turns(settings)
    released.min_speech_ms = barge_in.MAX_HOLD_MS
    assert feed(released, "..####") == []
    assert released.held is not None
    assert released.release() == [vad.Turn(vad.Event.SPEECH_STARTED, 2 * vad.FRAME_SAMPLES)]
    assert released.is_speaking and released.held is None


def test_backchannels_and_sound_labels_are_not_words() -> None:
    for text in ("Mm-hmm.", "Uh-huh", " mm", "M", "Yeah.", "Okay, okay.", "(coughs)", "[BLANK_AUDIO]", ""):
        assert barge_in.is_backchannel(text), text
    for text in ("Stop.", "Wait, what time is it?", "Mm-hmm, but what about Tuesday?"):
        assert not barge_in.is_backchannel(text), text


async def test_the_gate_releases_held_speech_only_for_words_whisper_is_sure_of() -> None:
    """Whisper's guesses on a hum are words too ("Damn."), but unsure ones: they do not barge in."""
    heard: dict[str, Any] = {"text": "", "logprob": 0.0}

    async def transcribe(audio: np.ndarray) -> str:
        return str(heard["text"])

    async def score(audio: np.ndarray, text: str) -> list[asr.Logprob]:
        return [asr.Logprob(word, float(heard["logprob"])) for word in text.split()]

    async def verdict(text: str, logprob: float) -> bool:
        heard.update(text=text, logprob=logprob)
        gate = barge_in.Gate(transcribe, score, asyncio.ensure_future)
        turns = vad.Turns(TurnDetection())
        turns.min_speech_ms = barge_in.MAX_HOLD_MS
        feed(turns, "#" * (barge_in.CHECK_MS // vad.FRAME_MS))
        gate.step(turns, lambda start: np.zeros(1, np.float32))
        await asyncio.sleep(0.01)
        return gate.take(turns)

    assert await verdict("Stop.", -0.4)
    assert not await verdict("Damn.", barge_in.MIN_MEAN_LOGPROB - 0.5)
    assert not await verdict("Mm-hmm.", -0.1)
    assert await verdict("Stop.", barge_in.MIN_MEAN_LOGPROB - 0.5)  # a command, however unsure
