"""The cut-off bench's replay of a session's turns, with a test double for the models' verdicts."""

from __future__ import annotations

from typing import Any

import numpy as np

from livegen.bench import turn_cutoffs
from livegen.bench.turn_cutoffs import Clip, Judge, Mode, Paused
from livegen.models.cascade import vad

FRAME = vad.FRAME_SAMPLES
AUTO = next(m for m in turn_cutoffs.modes() if m.name == "semantic_vad auto")
AUTO_WORDS = next(m for m in turn_cutoffs.modes() if m.name == "semantic_vad auto +words")


class _Heard(Judge):
    """Smart Turn calls every pause complete; Whisper hears "Book a table for" in the first
    ``first_frames`` of a turn, the whole sentence after, in ``asr_s`` seconds."""

    def __init__(self, asr_s: float, first_frames: int = 45) -> None:
        super().__init__(None)
        self.asr_s, self.first_frames = asr_s, first_frames

    def _ask(self, audio: np.ndarray) -> tuple[float, float]:
        return 1.0, 0.01

    def _hear(self, audio: np.ndarray, recogniser: str = "") -> tuple[str, float]:
        first = len(audio) < self.first_frames * FRAME
        return ("Book a table for" if first else "Book a table for four people."), self.asr_s


def _clip(pause_frames: int) -> Clip:
    """25 frames of speech, a pause, 25 more frames of speech, then silence."""
    speech, pause = [0.9] * 25, [0.0] * pause_frames
    probabilities = (*[0.0] * 10, *speech, *pause, *speech, *[0.0] * 300)
    pause_start = 35 * FRAME
    speech_end = (60 + pause_frames) * FRAME
    paused = Paused(np.zeros(len(probabilities) * FRAME, np.float32), pause_start, pause_start, speech_end)
    return Clip("g", "v", paused, probabilities)


def _cut_and_delay_ms(mode: Mode, judge: Any, clip: Clip) -> tuple[bool, float]:
    found = turn_cutoffs.stops(clip, mode, judge)
    end = clip.paused.speech_end
    return any(s < end for s in found), (min(s for s in found if s >= end) - end) * 1000 / vad.SAMPLE_RATE


def test_the_words_hold_a_pause_the_model_calls_complete_and_their_time_is_counted() -> None:
    clip = _clip(pause_frames=25)  # 800 ms
    cut, delay_ms = _cut_and_delay_ms(AUTO, _Heard(0.1), clip)
    assert cut and delay_ms < 300  # Smart Turn alone: cut at the pause, then the end at the check
    cut, delay_ms = _cut_and_delay_ms(AUTO_WORDS, _Heard(0.4), clip)
    # With the words: held at the pause; the end waits for the transcript started at the pause.
    assert not cut and 400 < delay_ms < 1000


def test_a_verdict_that_arrives_after_the_user_went_on_is_stale() -> None:
    clip = _clip(pause_frames=12)  # 384 ms: Smart Turn answers within it, the words 1.5 s later
    judge = _Heard(1.5, first_frames=0)  # the words can end a request at every pause
    cut, _ = _cut_and_delay_ms(AUTO, judge, clip)
    assert cut
    cut, delay_ms = _cut_and_delay_ms(AUTO_WORDS, judge, clip)
    assert not cut and delay_ms >= 1500


def test_the_pause_goes_where_the_first_part_ends_not_at_the_longest_silence() -> None:
    rng = np.random.default_rng(3)
    speech = (0.2 * rng.standard_normal(3 * vad.SAMPLE_RATE)).astype(np.float32)
    speech[8000:8800] = 0  # 50 ms of silence where the first part ends (0.5 s)
    speech[30000:36000] = 0  # a longer silence later
    paused = turn_cutoffs.with_pause(speech, 600, near=8200)
    lead = vad.SAMPLE_RATE * 3 // 10
    assert (paused.pause_start, paused.pause_end) == (lead + 8000, lead + 8000 + 9600)
    # A voice that runs the words together: the quietest 10 ms near the end of the first part.
    speech[8000:8800] = 0.2 * rng.standard_normal(800)
    speech[8160:8320] *= 0.01
    assert turn_cutoffs.with_pause(speech, 600, near=8200).pause_start == lead + 8160
