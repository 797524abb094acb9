"""Turn cut-offs: how often a mid-sentence pause ends the turn, ``server_vad`` vs ``semantic_vad``.

The set is generated here, never checked in, in three groups of sentences,
each spoken by several voices (espeak-ng formant voices and the assistant's
Piper voice):

- paused after a function word, where the first part cannot end a request
  ("I would like to ... order a pizza.");
- paused after a content word, where it could ("what's the weather in Paris
  ... and in London?", "I need three ... make it four tickets."): neither the
  words nor, often, the melody say that the user goes on;
- whole sentences that end in a preposition, a particle or a number ("What
  are you looking for?", "Call me at five."), with no pause: their real end
  must not be held for long.

A sentence is spoken whole and the speaker's own pause at the ellipsis is
replaced by 600-900 ms of silence: speaking it whole keeps the rising,
going-on melody before the pause that a person pausing mid-sentence has. The
pause is the silence nearest to where the first part, spoken alone, ends
(Piper makes no silence at an ellipsis: its longest silence is elsewhere).

Each utterance goes through Silero once, and its speech probabilities
through the cascade's turn logic (``vad.Turns``) for each turn detection, as
in a session. ``semantic_vad`` runs twice in the same run: with Smart Turn
alone, and with Smart Turn and the words heard so far (``incomplete``,
``+words``), read from Whisper's transcript of the turn up to the pause, as
the stream's speculative transcript gives it. A verdict takes effect when it
would arrive: the model's measured time after the check, and for ``+words``
the recogniser's measured time after the pause where its transcript starts,
whichever is later; if the user speaks meanwhile it is stale. A turn cut
early is a speech stop before the speech ends; at the real end, the delay
from the last speech to the speech stop is compared with ``server_vad``'s.
"""

from __future__ import annotations

import functools
import hashlib
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: (first part, rest): the first part, heard alone, is not a whole request.
SENTENCES = (
    ("I would like to", "order a pizza."),
    ("book a table for", "four people."),
    ("can you tell me the", "weather in Paris."),
    ("set an alarm for", "seven in the morning."),
    ("I want to fly to", "Berlin next Tuesday."),
    ("send a message to", "my brother."),
    ("my phone number is", "five five five, one two three four."),
    ("let me think about", "the second option."),
)
#: (first part, rest): the first part ends in a content word and could end a request.
AFTER_CONTENT_WORDS = (
    ("what's the weather in Paris", "and in London?"),
    ("I need three", "make it four tickets."),
    ("remind me to call my mother", "at six tonight."),
    ("turn off the lights in the kitchen", "and the hallway."),
    ("find me a cheap hotel", "near the station."),
    ("tell me a joke", "about cats."),
)
#: Whole requests ending in a preposition, a particle or a number: no pause inside.
ENDING_IN_A_PREPOSITION_OR_NUMBER = (
    "What are you looking for?",
    "Which one do you want to go with?",
    "Call me at five.",
    "Who should I send it to?",
    "What is this button for?",
    "Wake me up at seven.",
    "Turn the lights on.",
    "This is the one I was thinking of.",
)
GROUPS = ("after a function word", "after a content word", "whole, ends in prep./number")
#: (label, voice as ``CascadeModel.speak`` takes it).
VOICES = (
    ("espeak en-us m2", "espeak:en-us+m2"),
    ("espeak en-gb-scotland f3", "espeak:en-gb-scotland+f3"),
    ("espeak en-029 m4", "espeak:en-029+m4"),
    ("espeak en m3", "espeak:en+m3"),
    ("piper joe", ""),
)
PAUSES_MS = (600, 750, 900)
EAGERNESS = ("low", "auto", "high")
#: A recogniser besides the server's default that hears the words (auto only).
WORDS_BY = "whisper-base"
SAMPLE_RATE = 16_000
#: Below this RMS over 10 ms a synthesised voice is silent (its pauses are digital silence).
_SILENT_RMS = 3e-3
#: Silence after each utterance: more than the longest maximum wait (low's 8 s).
_TRAIL_S = 9


@dataclass(frozen=True)
class Paused:
    """An utterance with a pause: 16 kHz float audio, where the pause starts and ends, speech end.

    A whole sentence has no pause: it starts and ends where the speech starts.
    """

    audio: np.ndarray
    pause_start: int
    pause_end: int
    speech_end: int


@dataclass(frozen=True)
class Clip:
    group: str
    voice: str
    paused: Paused
    #: Silero's speech probability for each frame of the audio and the silence after it.
    probabilities: tuple[float, ...]

    @functools.cached_property
    def heard(self) -> np.ndarray:
        """The utterance and the silence after it, as a session hears it (built once per clip:
        every turn detection replays it)."""
        return _with_trail(self.paused)


@dataclass(frozen=True)
class Mode:
    name: str
    settings: Any
    #: ``semantic_vad`` also reads the words heard so far.
    words: bool = False
    #: The recogniser that hears them ("": the server's default).
    recogniser: str = ""


def paused_utterance(model: Any, first: str, rest: str, voice: str, pause_ms: int) -> Paused:
    """``first... rest`` spoken by ``voice``, the silence after ``first`` made ``pause_ms`` long."""
    return with_pause(_spoken(model, f"{first}... {rest}", voice), pause_ms, _first_part(model, first, voice))


def _spoken(model: Any, text: str, voice: str) -> np.ndarray:
    import soxr

    pcm = model.speak(text, voice).result(timeout=120).pcm
    speech: np.ndarray = soxr.resample(np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0, 24_000, 16_000)
    return speech


def _first_part(model: Any, first: str, voice: str) -> int:
    """How long ``first`` lasts spoken alone (samples): where to look for its end in the sentence."""
    return _last_sound(_spoken(model, first, voice))


def with_pause(speech: np.ndarray, pause_ms: int | None, near: int = 0) -> Paused:
    """``speech`` after 300 ms of silence, the silence nearest ``near`` made ``pause_ms`` long
    (None: no pause, the sentence as it is)."""
    lead = np.zeros(SAMPLE_RATE * 3 // 10, np.float32)
    if pause_ms is None:
        audio = np.concatenate([lead, speech]).astype(np.float32)
        return Paused(audio, len(lead), len(lead), len(lead) + _last_sound(speech))
    start, end = _gap_near(speech, near)
    pause = np.zeros(pause_ms * SAMPLE_RATE // 1000, np.float32)
    audio = np.concatenate([lead, speech[:start], pause, speech[end:]]).astype(np.float32)
    pause_start = len(lead) + start
    speech_end = pause_start + len(pause) + _last_sound(speech[end:])
    return Paused(audio, pause_start, pause_start + len(pause), speech_end)


def _frames_silent(audio: np.ndarray) -> np.ndarray:
    frames = audio[: len(audio) // 160 * 160].reshape(-1, 160)
    silent: np.ndarray = np.sqrt((frames**2).mean(axis=1)) < _SILENT_RMS
    return silent


def _gap_near(audio: np.ndarray, near: int) -> tuple[int, int]:
    """The longest silence within 300 ms of ``near`` with speech on both sides (start, end), in
    samples; where there is none, the quietest 10 ms there (a voice may run the words together:
    Piper says "for... four" with no silence between them), as an empty gap."""
    silent = _frames_silent(audio)
    target = near // 160
    best, index = (0, 0), 0
    while index < len(silent):
        stop = index
        while stop < len(silent) and silent[stop]:
            stop += 1
        is_near = min(abs(index - target), abs(stop - target)) <= 30
        if index > 0 and stop < len(silent) and is_near and stop - index > best[1] - best[0]:
            best = (index, stop)
        index = stop + 1
    if best == (0, 0):
        frames = audio[: len(audio) // 160 * 160].reshape(-1, 160)
        low, high = max(1, target - 30), min(len(frames) - 1, target + 30)
        if low >= high:
            raise ValueError("the utterance is shorter than its first part")
        quietest = low + int(np.argmin((frames[low:high] ** 2).mean(axis=1)))
        best = (quietest, quietest)
    return best[0] * 160, best[1] * 160


def _last_sound(audio: np.ndarray) -> int:
    loud = np.flatnonzero(~_frames_silent(audio))
    return int(loud[-1] + 1) * 160 if len(loud) else 0


def speech_probabilities(model: Any, audio: np.ndarray) -> tuple[float, ...]:
    """Silero's probability for each frame of ``audio``, from the detector a session uses."""
    from livegen.models.cascade import vad
    from livegen.models.voice import TurnDetection

    class Heard(vad.Turns):
        def __init__(self) -> None:
            super().__init__(TurnDetection())
            self.probabilities: list[float] = []

        def feed(self, probability: float, num_samples: int = vad.FRAME_SAMPLES) -> list[vad.Turn]:
            self.probabilities.append(probability)
            return []

    detector = vad.Detector(model.vad_path, TurnDetection())
    heard = detector.turns = Heard()
    detector.feed((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())
    return tuple(heard.probabilities)


def build_set(model: Any) -> list[Clip]:
    """Every group's sentences in every voice, each sentence synthesised once per voice."""
    clips: list[Clip] = []
    paused = [(GROUPS[0], SENTENCES), (GROUPS[1], AFTER_CONTENT_WORDS)]
    for label, voice in VOICES:
        for group, sentences in paused:
            for first, rest in sentences:
                speech, near = _spoken(model, f"{first}... {rest}", voice), _first_part(model, first, voice)
                clips += [_clip(model, group, label, with_pause(speech, ms, near)) for ms in PAUSES_MS]
        for sentence in ENDING_IN_A_PREPOSITION_OR_NUMBER:
            clips.append(_clip(model, GROUPS[2], label, with_pause(_spoken(model, sentence, voice), None)))
    return clips


def _clip(model: Any, group: str, voice: str, paused: Paused) -> Clip:
    return Clip(group, voice, paused, speech_probabilities(model, _with_trail(paused)))


def _with_trail(paused: Paused) -> np.ndarray:
    return np.concatenate([paused.audio, np.zeros(SAMPLE_RATE * _TRAIL_S, np.float32)])


class Judge:
    """semantic_vad's verdicts at a pause, each model asked once per distinct audio (cached)."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self._smart_turn: dict[str, tuple[float, float]] = {}
        self._words: dict[str, tuple[str, float]] = {}
        #: Seconds per recognition of the turn up to a pause, per recogniser ("": the default).
        self.asr_timings: dict[str, list[float]] = {}

    def delay(self, audio: np.ndarray, check: Any, at: tuple[int, int, int], mode: Mode) -> int | None:
        """Samples after the check when a "complete" verdict arrives; None when the turn is held.

        ``at``: where the turn starts, where its pause was reported (the transcript covers the
        turn up to there), where the check was reported.
        """
        from livegen.models.cascade import endpoint, incomplete, vad

        turn_start, pause_at, check_at = at
        begin = max(check.start, check.sample - endpoint.WINDOW_S * SAMPLE_RATE)
        probability, model_s = self._ask(audio[begin : check.sample])
        if probability < vad.COMPLETE_AT[mode.settings.eagerness]:
            return None
        if not mode.words:
            return int(model_s * SAMPLE_RATE)
        text, asr_s = self._hear(audio[turn_start:pause_at], mode.recogniser)
        if incomplete.holds(text):
            return None
        words_at = pause_at + int(asr_s * SAMPLE_RATE)
        return max(int(model_s * SAMPLE_RATE), words_at - check_at)

    def _ask(self, audio: np.ndarray) -> tuple[float, float]:
        key = hashlib.sha1(audio.tobytes()).hexdigest()
        if key not in self._smart_turn:
            endpointer = self._model.endpointer
            self._smart_turn[key] = (endpointer.probability_now(audio), endpointer.timings[-1])
        return self._smart_turn[key]

    def _hear(self, audio: np.ndarray, recogniser: str = "") -> tuple[str, float]:
        from livegen.models.cascade import asr

        key = recogniser + hashlib.sha1(audio.tobytes()).hexdigest()
        if key not in self._words:
            started = time.perf_counter()
            text = self._model.transcribe_now(audio, asr.Options(recogniser))
            self.asr_timings.setdefault(recogniser, []).append(time.perf_counter() - started)
            self._words[key] = (text, self.asr_timings[recogniser][-1])
        return self._words[key]


def stops(clip: Clip, mode: Mode, judge: Judge) -> list[int]:
    """Where turns end in ``clip`` (samples) under ``mode``, as a session would see them."""
    from livegen.models.cascade import vad

    audio = clip.heard
    turns = vad.Turns(mode.settings, has_endpoint=True)
    found: list[int] = []
    due: list[tuple[int, int]] = []  # (where a "complete" verdict arrives, its check's sample)
    turn_start = pause_at = 0
    for probability in clip.probabilities:
        for event in turns.feed(probability):
            if event.event is vad.Event.SPEECH_STARTED:
                turn_start = event.sample
            elif event.event is vad.Event.PAUSE:
                pause_at = turns.position
            elif event.event is vad.Event.CHECK:
                delay = judge.delay(audio, event, (turn_start, pause_at, turns.position), mode)
                if delay is not None:
                    due.append((turns.position + delay, event.sample))
            elif event.event is vad.Event.SPEECH_STOPPED:
                found.append(event.sample)
        for arrival in [d for d in due if d[0] <= turns.position]:
            due.remove(arrival)
            found += [stop.sample for stop in turns.complete(arrival[1])]
    return found


def modes() -> list[Mode]:
    """server_vad, and semantic_vad at each eagerness (silence as a session gets it) before and after."""
    from livegen.models.voice import TurnDetection
    from livegen.voice.turn_detection import SEMANTIC_SILENCE_MS

    found = [Mode("server_vad", TurnDetection())]
    for eagerness in EAGERNESS:
        settings = TurnDetection(silence_duration_ms=SEMANTIC_SILENCE_MS[eagerness], eagerness=eagerness)
        found += [
            Mode(f"semantic_vad {eagerness}", settings),
            Mode(f"semantic_vad {eagerness} +words", settings, True),
        ]
        if eagerness == "auto":  # the words are only as good as the recogniser: a session may pick another
            found.append(Mode(f"semantic_vad auto +words ({WORDS_BY})", settings, True, WORDS_BY))
    return found


def measure(model: Any) -> dict[str, Any]:
    """Cut-off shares and end delays per turn detection and group, over every sentence and voice."""
    if model.endpointer is None:
        raise RuntimeError("the cascade has no end-of-turn model: pip install 'livegen[turn]'")
    clips = build_set(model)
    judge = Judge(model)
    results: dict[str, Any] = {
        "num_utterances": len(clips),
        "by_group": {group: sum(c.group == group for c in clips) for group in GROUPS},
        "recogniser": model.recognizer.name,
        "modes": {},
    }
    delays: dict[str, list[float]] = {}
    for mode in modes():
        results["modes"][mode.name], delays[mode.name] = _mode(clips, mode, judge)
    _add_extra_delays(results["modes"], delays, clips)
    results |= _timings("endpoint", model.endpointer.timings) | _timings("asr", judge.asr_timings.get("", []))
    results |= _timings(f"asr_{WORDS_BY}", judge.asr_timings.get(WORDS_BY, []))
    from livegen.bench import turn_budget  # it builds on this module

    results["at_budget"] = turn_budget.measure(model, clips, judge)
    return results


def _timings(name: str, seconds: Sequence[float]) -> dict[str, Any]:
    ordered = sorted(seconds) or [float("nan")]
    return {
        f"{name}_ms_per_call_p50": 1000 * statistics.median(ordered),
        f"{name}_ms_per_call_p95": 1000 * ordered[int(0.95 * (len(ordered) - 1))],
        f"{name}_calls": len(seconds),
    }


def _mode(clips: Sequence[Clip], mode: Mode, judge: Judge) -> tuple[dict[str, Any], list[float]]:
    from livegen.models.cascade import vad

    cuts: list[bool] = []
    delays: list[float] = []
    for clip in clips:
        found = stops(clip, mode, judge)
        speech_end = clip.paused.speech_end
        cuts.append(any(s < speech_end for s in found))
        last = [s for s in found if s >= speech_end]
        delays.append((last[0] - speech_end) * 1000 / SAMPLE_RATE if last else float("nan"))
    # A real end the model missed waits the whole maximum (server_vad has no model: None).
    longest = vad.MAX_WAIT_MS.get(mode.settings.eagerness or "")
    by_group: dict[str, Any] = {}
    for group in GROUPS:
        index = [i for i, c in enumerate(clips) if c.group == group]
        ends = [delays[i] for i in index]
        at_max = None if longest is None else sum(d >= longest - 100 for d in ends) / len(ends)
        by_group[group] = {
            "cut_share": sum(cuts[i] for i in index) / len(index),
            "end_delay_ms_p50": statistics.median(ends),
            "end_delay_ms_p95": float(np.percentile(ends, 95)),
            "end_at_max_wait_share": at_max,
        }
    paused = [i for i, c in enumerate(clips) if c.paused.pause_end > c.paused.pause_start]
    voices = dict.fromkeys(clips[i].voice for i in paused)
    row = {
        "cut_share_paused": sum(cuts[i] for i in paused) / len(paused),
        "cut_share_paused_by_voice": {
            v: statistics.mean(cuts[i] for i in paused if clips[i].voice == v) for v in voices
        },
        "by_group": by_group,
    }
    return row, delays


def _add_extra_delays(rows: dict[str, Any], delays: dict[str, list[float]], clips: Sequence[Clip]) -> None:
    """Each mode's delay at real ends beyond server_vad's, same utterance, p50 per group."""
    base = delays["server_vad"]
    for name, row in rows.items():
        extra = [a - b for a, b in zip(delays[name], base, strict=True)]
        for group in GROUPS:
            values = [e for e, c in zip(extra, clips, strict=True) if c.group == group]
            row["by_group"][group]["extra_end_delay_ms_p50"] = statistics.median(values)
        row["cut_ratio_to_server_vad"] = row["cut_share_paused"] / max(
            rows["server_vad"]["cut_share_paused"], 1e-9
        )


def render(results: dict[str, Any]) -> list[str]:
    groups = ", ".join(f"{n} {g}" for g, n in results["by_group"].items())
    lines = [
        f"turn cut-offs: {results['num_utterances']} utterances ({groups}); paused ones pause 600-900 ms "
        f"mid-sentence. Smart Turn p50 {results['endpoint_ms_per_call_p50']:.1f} ms, "
        f"p95 {results['endpoint_ms_per_call_p95']:.1f} ms per call ({results['endpoint_calls']} calls); "
        f"{results['recogniser']} up to the pause p50 {results['asr_ms_per_call_p50']:.0f} ms, "
        f"p95 {results['asr_ms_per_call_p95']:.0f} ms ({results['asr_calls']} calls), {WORDS_BY} "
        f"p50 {results[f'asr_{WORDS_BY}_ms_per_call_p50']:.0f} ms ({results[f'asr_{WORDS_BY}_calls']} calls)",
        f"  {'mode':<40}{'cut (paused)':>13}{'vs server':>10}  cut early by voice (paused)",
    ]
    for mode, row in results["modes"].items():
        by_voice = "  ".join(f"{share:.2f}" for share in row["cut_share_paused_by_voice"].values())
        lines.append(
            f"  {mode:<40}{row['cut_share_paused']:13.3f}{row['cut_ratio_to_server_vad']:10.2f}  {by_voice}"
        )
    for group in results["by_group"]:
        lines.append(
            f"  {group + ':':<42}{'cut':>6}{'end p50':>10}{'p95':>8}{'extra p50':>11}{'at max wait':>13}"
        )
        for mode, row in results["modes"].items():
            cell = row["by_group"][group]
            lines.append(
                f"    {mode:<40}{cell['cut_share']:6.3f}{cell['end_delay_ms_p50']:8.0f}ms"
                f"{cell['end_delay_ms_p95']:6.0f}ms{cell['extra_end_delay_ms_p50']:9.0f}ms"
                f"{_share(cell['end_at_max_wait_share']):>13}"
            )
    voices = next(iter(results["modes"].values()))["cut_share_paused_by_voice"]
    lines.append(f"  voices: {', '.join(voices)}")
    if "at_budget" in results:
        from livegen.bench import turn_budget

        lines += turn_budget.render(results["at_budget"])
    return lines


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
