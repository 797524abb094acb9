"""End of turn as eot-bench reports it: latency at real ends at a 5% false cut-off budget.

Part of ``livegen bench voice-model --part cutoffs`` (``turn_cutoffs``'s
utterances: sentences paused 600-900 ms mid-way, and whole ones). A detector
has an operating point; sweeping it trades false cut-offs (a paused
utterance whose turn ends before its speech does) against the delay from the
last speech to the end of a complete turn. The figure is the lowest median
delay among the points whose false cut-off rate is within the budget.

Three detectors, each a family of points:

- silence alone (``server_vad``), the point being its silence window;
- Smart Turn: at each pause of 200 ms its verdict ends the turn when its
  probability reaches a threshold, else silence ends it after a longest wait;
- Smart Turn and the words (``incomplete``): the same, held when the words
  heard up to the pause cannot end a request.

One replay records every check (Smart Turn is asked at every pause, its
verdict never acted on, the words read at each), one replay per silence
window records where silence alone ends each turn; every operating point is
then computed from those, as the session would act: a verdict arrives after
the model's measured time (and the recogniser's, for the words), and one
that arrives after the user spoke again is stale.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from livegen.bench import turn_cutoffs
from livegen.bench.turn_cutoffs import SAMPLE_RATE, Clip, Judge, Mode

BUDGET = 0.05
THRESHOLDS = (0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 2.0)
#: Silence windows, and semantic_vad's longest waits (ms).
WINDOWS_MS = (500, 700, 900, 1000, 1100, 1200, 1500, 2000, 4000)


@dataclass(frozen=True)
class Check:
    """One Smart Turn check: where its verdict would arrive (samples) with and without the words."""

    probability: float
    #: Where the check was made (a verdict with no compute time would arrive here).
    check_at: int
    #: Where the speech before the pause ended.
    last_speech: int
    model_at: int
    words_at: int
    holds: bool
    #: Whether speech follows the pause (a mid-utterance pause), and where.
    resumes_at: int | None


class Recorder(Judge):
    """A judge that records each check and never ends a turn."""

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        self.checks: list[Check] = []
        self.clip: Clip | None = None

    def delay(self, audio: np.ndarray, check: Any, at: tuple[int, int, int], mode: Mode) -> int | None:
        from livegen.models.cascade import endpoint, incomplete

        turn_start, pause_at, check_at = at
        begin = max(check.start, check.sample - endpoint.WINDOW_S * SAMPLE_RATE)
        probability, model_s = self._ask(audio[begin : check.sample])
        text, asr_s = self._hear(audio[turn_start:pause_at])
        model_at = check_at + int(model_s * SAMPLE_RATE)
        words_at = max(model_at, pause_at + int(asr_s * SAMPLE_RATE))
        assert self.clip is not None
        resumes = _next_speech(self.clip, check_at)
        held = incomplete.holds(text)
        self.checks.append(Check(probability, check_at, check.sample, model_at, words_at, held, resumes))
        return None


def _next_speech(clip: Clip, after: int) -> int | None:
    """Where Silero hears speech again after ``after`` (samples), if it does."""
    from livegen.models.cascade import vad

    first = after // vad.FRAME_SAMPLES
    for index, probability in enumerate(clip.probabilities[first:], first):
        if probability >= 0.5:
            return index * vad.FRAME_SAMPLES
    return None


def measure(model: Any, clips: Sequence[Clip], judge: Judge) -> dict[str, Any]:
    """The sweep, its best points within ``BUDGET``, and the shipped eagerness presets."""
    from livegen.models.voice import TurnDetection

    recorder = Recorder(model)
    recorder._smart_turn, recorder._words = judge._smart_turn, judge._words  # reuse what was asked
    record = Mode("record", TurnDetection(silence_duration_ms=1200, eagerness="low"), True)
    checks: list[list[Check]] = []
    for clip in clips:
        recorder.clip, recorder.checks = clip, []
        turn_cutoffs.stops(clip, record, recorder)
        checks.append(recorder.checks)
    silence = {ms: [_silence(clip, ms, judge) for clip in clips] for ms in WINDOWS_MS}
    rows: dict[tuple[str, float | None, int], list[tuple[bool, float]]] = {
        (detector, threshold, ms): [
            _semantic(clip, found, silence[ms][i], threshold, detector)
            for i, (clip, found) in enumerate(zip(clips, checks, strict=True))
        ]
        for ms in WINDOWS_MS
        for detector in DETECTORS
        for threshold in THRESHOLDS
    } | {("silence", None, ms): silence[ms] for ms in WINDOWS_MS}
    rows |= {
        (detector, short, ms): [
            _words_wait(clip, found, silence[ms][i], short, detector.endswith("no compute"))
            for i, (clip, found) in enumerate(zip(clips, checks, strict=True))
        ]
        for ms in WINDOWS_MS
        for detector in WORDS_WAIT
        for short in SHORT_WAITS_MS
        if short < ms
    }
    everyone = _points(rows, clips, lambda clip: True)
    tuning = _points(rows, clips, lambda clip: clip.voice in TUNING_VOICES)
    held_out = _points(rows, clips, lambda clip: clip.voice not in TUNING_VOICES)
    best: dict[str, Any] = {}
    for key in ("false_cut_rate", "false_cut_rate_function_words"):
        best[key] = _best(everyone, key)
        # Chosen on the tuning voices, then measured on voices it never saw.
        chosen = _best(tuning, key)
        best[f"{key}, chosen on {' and '.join(TUNING_VOICES)}, on the other voices"] = {
            name: next(p for p in held_out if _same(p, point)) for name, point in chosen.items()
        }
    return {"budget": BUDGET, "points": everyone, "best": best, "presets": _presets(everyone)}


#: The voices an operating point is chosen on; it is then measured on the others.
TUNING_VOICES = ("espeak en-us m2", "piper joe")


def _points(
    rows: dict[tuple[str, float | None, int], list[tuple[bool, float]]],
    clips: Sequence[Clip],
    keep: Callable[[Clip], bool],
) -> list[dict[str, Any]]:
    index = [i for i, clip in enumerate(clips) if keep(clip)]
    groups = [clips[i].group for i in index]
    return [
        _point(detector, threshold, ms, [found[i] for i in index], groups)
        for (detector, threshold, ms), found in rows.items()
    ]


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a[key] == b[key] for key in ("detector", "threshold", "window_ms"))


#: Smart Turn alone or with the words, each with its verdicts arriving after the measured compute
#: time (as on this machine, at its load) or at the check (no compute time: the detector itself).
DETECTORS = ("smart turn", "smart turn + words", "smart turn, no compute", "smart turn + words, no compute")


def _silence(clip: Clip, window_ms: int, judge: Judge) -> tuple[bool, float]:
    """(cut early, ms from the last speech to the end) under silence alone of ``window_ms``."""
    from livegen.models.voice import TurnDetection

    found = turn_cutoffs.stops(clip, Mode("silence", TurnDetection(silence_duration_ms=window_ms)), judge)
    end = clip.paused.speech_end
    after = [s for s in found if s >= end]
    return any(s < end for s in found), (after[0] - end) * 1000 / SAMPLE_RATE if after else float("inf")


def _semantic(
    clip: Clip, checks: list[Check], silence: tuple[bool, float], threshold: float, detector: str
) -> tuple[bool, float]:
    """(cut early, end delay ms): Smart Turn (and the words) at ``threshold``, or silence."""
    is_cut, end_ms = silence
    words = "words" in detector
    for check in checks:
        if check.probability < threshold or (words and check.holds):
            continue
        arrives = check.words_at if words else check.model_at
        if detector.endswith("no compute"):
            arrives = check.check_at
        if check.resumes_at is not None:  # a pause inside the utterance: a cut unless stale
            is_cut = is_cut or arrives < check.resumes_at
        else:
            end_ms = min(end_ms, (arrives - clip.paused.speech_end) * 1000 / SAMPLE_RATE)
    return is_cut, end_ms


#: The words alone choose the silence: a short one when they can end a request, the long one when
#: they cannot (its ``threshold`` is the short wait, in ms); Smart Turn is not asked.
WORDS_WAIT = ("words pick the wait", "words pick the wait, no compute")
SHORT_WAITS_MS = (300, 400, 500, 600, 700)


def _words_wait(
    clip: Clip, checks: list[Check], silence: tuple[bool, float], short_ms: float, free: bool
) -> tuple[bool, float]:
    """(cut early, end delay ms): silence of ``short_ms`` ends the turn where the words heard up to
    the pause can end a request (once they are heard), else the long silence (``silence``) does."""
    is_cut, end_ms = silence
    for check in checks:
        if check.holds:
            continue
        arrives = check.last_speech + int(short_ms * SAMPLE_RATE / 1000)
        if not free:
            arrives = max(arrives, check.words_at)
        if check.resumes_at is not None:
            is_cut = is_cut or arrives < check.resumes_at
        else:
            end_ms = min(end_ms, (arrives - clip.paused.speech_end) * 1000 / SAMPLE_RATE)
    return is_cut, end_ms


def _point(
    detector: str, threshold: float | None, window_ms: int, rows: list[tuple[bool, float]], groups: list[str]
) -> dict[str, Any]:
    """One operating point: false cut-offs over all paused utterances and over those paused after a
    function word (truly unfinished there, as eot-bench's are), and the end delays of all."""
    paused = [cut for (cut, _), group in zip(rows, groups, strict=True) if group != turn_cutoffs.GROUPS[2]]
    function = [cut for (cut, _), group in zip(rows, groups, strict=True) if group == turn_cutoffs.GROUPS[0]]
    ends = [end for _, end in rows]
    return {
        "detector": detector,
        "threshold": threshold,
        "window_ms": window_ms,
        "false_cut_rate": sum(paused) / max(1, len(paused)),
        "false_cut_rate_function_words": sum(function) / max(1, len(function)),
        "end_ms_p50": statistics.median(ends),
        "end_ms_mean": statistics.mean(ends),
    }


def _best(points: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Per detector, the point with the lowest median end delay whose ``key`` rate is within budget."""
    best: dict[str, Any] = {}
    for point in points:
        if point[key] > BUDGET:
            continue
        kept = best.get(point["detector"])
        if kept is None or point["end_ms_p50"] < kept["end_ms_p50"]:
            best[point["detector"]] = point
    return best


def _presets(points: list[dict[str, Any]]) -> dict[str, Any]:
    """The shipped semantic_vad eagerness settings (threshold, longest wait) on the same curves."""
    from livegen.models.cascade import vad

    found: dict[str, Any] = {}
    for eagerness in ("low", "auto", "high"):
        key = (vad.COMPLETE_AT[eagerness], vad.MAX_WAIT_MS[eagerness])
        for point in points:
            if point["threshold"] is not None and (point["threshold"], point["window_ms"]) == key:
                found[f"{eagerness}, {point['detector']}"] = point
    return found


def render(results: dict[str, Any]) -> list[str]:
    lines = [
        f"end of turn at a {results['budget']:.0%} false cut-off budget (eot-bench style): the lowest "
        "median delay from the last speech to a complete turn's end among points within the budget"
    ]

    def row(name: str, point: dict[str, Any]) -> str:
        threshold = "-" if point["threshold"] is None else f"{point['threshold']:g}"
        if point["detector"] in WORDS_WAIT:
            threshold = f"{threshold}ms"
        return (
            f"    {name:<34} threshold {threshold:>5} wait {point['window_ms']:4d} ms: false cut-offs "
            f"{point['false_cut_rate']:.3f} (function words {point['false_cut_rate_function_words']:.3f}), "
            f"end p50 {point['end_ms_p50']:5.0f} ms, mean {point['end_ms_mean']:5.0f} ms"
        )

    for key, best in results["best"].items():
        lines.append(f"  within the budget on {key.replace('_', ' ')}:")
        lines += [row(name, point) for name, point in best.items()]
    lines.append("  shipped presets on the same curves:")
    lines += [row(name, point) for name, point in results["presets"].items()]
    return lines
