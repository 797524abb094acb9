"""The eot-bench-style sweep of end-of-turn detectors: how one operating point is scored.

Pure arithmetic on recorded checks (no model): a verdict that arrives inside
a mid-sentence pause cuts the turn, one that arrives after the user spoke
again is stale, the words hold what Smart Turn alone would cut, and the
figure is the fastest point within the false cut-off budget.
"""

from __future__ import annotations

import numpy as np
import pytest

from livegen.bench import turn_budget, turn_cutoffs
from livegen.bench.turn_budget import Check

MS = turn_cutoffs.SAMPLE_RATE // 1000
#: Speech ends at 2000 ms; a mid-sentence pause from 1000 to 1700 ms.
CLIP = turn_cutoffs.Clip(
    turn_cutoffs.GROUPS[0],
    "espeak en m3",
    turn_cutoffs.Paused(np.zeros(1, np.float32), 1000 * MS, 1700 * MS, 2000 * MS),
    (),
)
SILENCE = (False, 1100.0)  # silence alone: no cut, the end 1100 ms after the last speech


def mid(probability: float, arrives_ms: int, holds: bool = False) -> Check:
    return Check(
        probability, 1250 * MS, 1000 * MS, arrives_ms * MS, arrives_ms * MS + 100 * MS, holds, 1700 * MS
    )


def end(probability: float, arrives_ms: int, holds: bool = False) -> Check:
    return Check(probability, 2250 * MS, 2000 * MS, arrives_ms * MS, arrives_ms * MS + 100 * MS, holds, None)


def test_a_verdict_inside_the_pause_cuts_the_turn_and_a_late_one_is_stale() -> None:
    assert turn_budget._semantic(CLIP, [mid(0.9, 1300)], SILENCE, 0.5, "smart turn") == (True, 1100.0)
    assert turn_budget._semantic(CLIP, [mid(0.9, 1800)], SILENCE, 0.5, "smart turn") == (False, 1100.0)
    assert turn_budget._semantic(CLIP, [mid(0.4, 1300)], SILENCE, 0.5, "smart turn") == (False, 1100.0)


def test_the_words_hold_what_smart_turn_alone_would_cut() -> None:
    held = [mid(0.9, 1300, holds=True), end(0.9, 2300)]
    assert turn_budget._semantic(CLIP, held, SILENCE, 0.5, "smart turn") == (True, 300.0)
    # With the words, the verdict also waits for the recogniser (100 ms more here).
    assert turn_budget._semantic(CLIP, held, SILENCE, 0.5, "smart turn + words") == (False, 400.0)
    assert turn_budget._semantic(CLIP, held, SILENCE, 0.5, "smart turn + words, no compute") == (False, 250.0)


def test_silence_still_ends_a_turn_smart_turn_does_not_call_complete() -> None:
    assert turn_budget._semantic(CLIP, [end(0.2, 2300)], SILENCE, 0.5, "smart turn") == (False, 1100.0)
    assert turn_budget._semantic(CLIP, [end(0.9, 2300)], (True, 600.0), 0.5, "smart turn") == (True, 300.0)


def test_the_best_point_is_the_fastest_within_the_budget() -> None:
    groups = [turn_cutoffs.GROUPS[0]] * 20
    fast = turn_budget._point("smart turn", 0.5, 1000, [(i < 2, 300.0) for i in range(20)], groups)
    safe = turn_budget._point("smart turn", 0.9, 1000, [(i < 1, 700.0) for i in range(20)], groups)
    slow = turn_budget._point("smart turn", 0.99, 1000, [(False, 1000.0)] * 20, groups)
    assert (fast["false_cut_rate"], safe["false_cut_rate"]) == (pytest.approx(0.1), pytest.approx(0.05))
    best = turn_budget._best([fast, safe, slow], "false_cut_rate")
    assert best["smart turn"] is safe


def test_the_words_pick_a_short_silence_where_they_can_end_a_request_and_the_long_one_where_not() -> None:
    # Words heard 100 ms after the model's arrival; a short wait of 500 ms from the last speech.
    complete = [mid(0.0, 1300), end(0.0, 2300)]
    assert turn_budget._words_wait(CLIP, complete, SILENCE, 500, free=False) == (True, 500.0)
    # The pause is 700 ms: a short wait of 800 ms outlasts it.
    assert turn_budget._words_wait(CLIP, complete, SILENCE, 800, free=False) == (False, 800.0)
    held = [mid(0.0, 1300, holds=True), end(0.0, 2300, holds=True)]
    assert turn_budget._words_wait(CLIP, held, SILENCE, 500, free=False) == (False, 1100.0)
    late_words = [end(0.0, 2700)]  # heard after the short wait: the end waits for them
    assert turn_budget._words_wait(CLIP, late_words, SILENCE, 500, free=False) == (False, 800.0)
    assert turn_budget._words_wait(CLIP, late_words, SILENCE, 500, free=True) == (False, 500.0)
