"""Whole clips' pieces: at most 30 s each, cut in a pause rather than through a word."""

from __future__ import annotations

import itertools

import numpy as np

from livegen.models.cascade.offline import PIECE_S, accepts_voice, pieces

RATE = 16_000


def test_a_short_clip_is_one_piece() -> None:
    assert pieces(np.ones(5 * RATE, np.float32)) == [(0, 5 * RATE)]


def test_a_long_clip_is_cut_in_its_pauses() -> None:
    rng = np.random.default_rng(0)
    audio = rng.uniform(-0.5, 0.5, 70 * RATE).astype(np.float32)  # loud all through...
    audio[27 * RATE : int(27.4 * RATE)] = 0  # ... but for a pause before the first 30 s
    audio[55 * RATE : int(55.4 * RATE)] = 0  # and one before the next 30 s
    spans = pieces(audio)
    assert spans[0][0] == 0 and spans[-1][1] == len(audio)
    assert all(end == start for (_, end), (start, _) in itertools.pairwise(spans))  # no gap
    assert all(end - start <= PIECE_S * RATE for start, end in spans)
    assert 27 * RATE <= spans[0][1] <= 27.4 * RATE
    assert 55 * RATE <= spans[1][1] <= 55.4 * RATE
    assert len(spans) == 3


def test_the_models_own_voice_names() -> None:
    assert accepts_voice("joe") and accepts_voice("espeak") and accepts_voice("espeak:en-us+m2")
    assert not accepts_voice("alloy") and not accepts_voice("espeak:") and not accepts_voice("espeak:a b")
