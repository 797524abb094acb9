"""Turn cut-offs: how often a mid-sentence pause ends the turn, ``server_vad`` vs ``semantic_vad``.

The set is generated here, never checked in: sentences whose first part
cannot end a turn ("I would like to ... order a pizza."), spoken as one
sentence by several voices (espeak-ng formant voices and the assistant's
Piper voice), with the speaker's own pause at the ellipsis replaced by
600-900 ms of silence. Speaking the sentence whole keeps the rising,
going-on melody before the pause that a person pausing mid-sentence has;
speaking the first part alone would end it like a finished sentence.

Each utterance goes through Silero and the cascade's turn logic (``vad.Turns``)
frame by frame, as in a session, with the end-of-turn model answered at once
(its cost per call is reported beside): a turn cut early is a speech stop
before the second part starts. At the real end of the sentence, the delay
from the last speech to the speech stop is compared with ``server_vad``'s.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
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
#: (label, voice as ``CascadeModel.speak`` takes it).
VOICES = (
    ("espeak en-us m2", "espeak:en-us+m2"),
    ("espeak en-gb-scotland f3", "espeak:en-gb-scotland+f3"),
    ("espeak en-029 m4", "espeak:en-029+m4"),
    ("espeak en m3", "espeak:en+m3"),
    ("piper joe", ""),
)
PAUSES_MS = (600, 750, 900)
SAMPLE_RATE = 16_000
#: Below this RMS over 10 ms a synthesised voice is silent (its pauses are digital silence).
_SILENT_RMS = 3e-3


@dataclass(frozen=True)
class Paused:
    """An utterance with a pause: 16 kHz float audio, where the pause starts and ends, speech end."""

    audio: np.ndarray
    pause_start: int
    pause_end: int
    speech_end: int


def paused_utterance(model: Any, first: str, rest: str, voice: str, pause_ms: int) -> Paused:
    """``first... rest`` spoken by ``voice``, its longest inner pause made ``pause_ms`` long."""
    import soxr

    pcm = model.speak(f"{first}... {rest}", voice).result(timeout=120).pcm
    speech = soxr.resample(np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0, 24_000, SAMPLE_RATE)
    start, end = _longest_gap(speech)
    pause = np.zeros(pause_ms * SAMPLE_RATE // 1000, np.float32)
    lead = np.zeros(SAMPLE_RATE * 3 // 10, np.float32)
    audio = np.concatenate([lead, speech[:start], pause, speech[end:]]).astype(np.float32)
    pause_start = len(lead) + start
    speech_end = pause_start + len(pause) + _last_sound(speech[end:])
    return Paused(audio, pause_start, pause_start + len(pause), speech_end)


def _frames_silent(audio: np.ndarray) -> np.ndarray:
    frames = audio[: len(audio) // 160 * 160].reshape(-1, 160)
    silent: np.ndarray = np.sqrt((frames**2).mean(axis=1)) < _SILENT_RMS
    return silent


def _longest_gap(audio: np.ndarray) -> tuple[int, int]:
    """The longest silence with speech on both sides, in samples (start, end)."""
    silent = _frames_silent(audio)
    best, index = (0, 0), 0
    while index < len(silent):
        stop = index
        while stop < len(silent) and silent[stop]:
            stop += 1
        if index > 0 and stop < len(silent) and stop - index > best[1] - best[0]:
            best = (index, stop)
        index = stop + 1
    if best == (0, 0):
        raise ValueError("the utterance has no pause inside it")
    return best[0] * 160, best[1] * 160


def _last_sound(audio: np.ndarray) -> int:
    loud = np.flatnonzero(~_frames_silent(audio))
    return int(loud[-1] + 1) * 160 if len(loud) else 0


def stops(model: Any, paused: Paused, settings: Any, cache: dict[tuple[int, int], float]) -> list[int]:
    """Where turns end in ``paused`` (samples), as a session would see them.

    The end-of-turn model is asked at each ``CHECK`` (once per pause: ``cache``
    keeps its answer for the other eagerness levels); a turn it ends, ends
    when its answer would arrive, the measured time of the call later.
    """
    from livegen.models.cascade import endpoint, vad

    detector = vad.Detector(model.vad_path, settings, has_endpoint=model.endpointer is not None)
    audio = np.concatenate([paused.audio, np.zeros(SAMPLE_RATE * 9, np.float32)])
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
    found: list[int] = []
    for offset in range(0, len(pcm), 2 * vad.FRAME_SAMPLES):
        events = detector.feed(pcm[offset : offset + 2 * vad.FRAME_SAMPLES])
        while events:
            event = events.pop(0)
            if event.event is vad.Event.SPEECH_STOPPED:
                found.append(event.sample)
            elif event.event is vad.Event.CHECK:
                key = (id(paused), event.sample)
                if key not in cache:
                    begin = max(event.start, event.sample - endpoint.WINDOW_S * SAMPLE_RATE)
                    cache[key] = model.endpointer.probability_now(audio[begin : event.sample])
                    cache[(id(paused), -event.sample)] = model.endpointer.timings[-1]
                if cache[key] >= vad.COMPLETE_AT[settings.eagerness]:
                    late = int(cache[(id(paused), -event.sample)] * SAMPLE_RATE)
                    found += [stop.sample + late for stop in detector.turns.complete(event.sample)]
    return found


def measure(model: Any) -> dict[str, Any]:
    """Cut-off shares and end delays per turn detection, over every sentence, voice and pause."""
    from livegen.models.voice import TurnDetection

    if model.endpointer is None:
        raise RuntimeError("the cascade has no end-of-turn model: pip install 'livegen[turn]'")
    modes = {"server_vad": TurnDetection()}
    modes |= {f"semantic_vad {e}": replace(TurnDetection(), eagerness=e) for e in ("low", "auto", "high")}
    clips = [
        (label, paused_utterance(model, first, rest, voice, pause_ms))
        for label, voice in VOICES
        for first, rest in SENTENCES
        for pause_ms in PAUSES_MS
    ]
    cache: dict[tuple[int, int], float] = {}
    results: dict[str, Any] = {"num_utterances": len(clips), "modes": {}}
    for mode, settings in modes.items():
        results["modes"][mode] = _mode(model, clips, settings, cache)
    base = results["modes"]["server_vad"]["end_delays_ms"]
    for mode in results["modes"].values():
        extra = [a - b for a, b in zip(mode.pop("end_delays_ms"), base, strict=True)]
        mode["extra_end_delay_ms_p50"] = statistics.median(extra)
    timings = sorted(model.endpointer.timings)
    results["endpoint_ms_per_call_p50"] = 1000 * statistics.median(timings)
    results["endpoint_ms_per_call_p95"] = 1000 * timings[int(0.95 * (len(timings) - 1))]
    results["endpoint_calls"] = len(timings)
    return results


def _mode(model: Any, clips: Sequence[tuple[str, Paused]], settings: Any, cache: Any) -> dict[str, Any]:
    from livegen.models.cascade import vad

    cut: dict[str, list[bool]] = {}
    end_delays: list[float] = []
    for label, paused in clips:
        found = stops(model, paused, settings, cache)
        cut.setdefault(label, []).append(any(s < paused.pause_end for s in found))
        last = [s for s in found if s >= paused.pause_end]
        delay = (last[0] - paused.speech_end) * 1000 / SAMPLE_RATE if last else float("nan")
        end_delays.append(delay)
    everyone = [c for cuts in cut.values() for c in cuts]
    # A real end the model missed waits the whole maximum (server_vad has no model: None).
    longest = vad.MAX_WAIT_MS.get(settings.eagerness or "")
    missed = None if longest is None else sum(d >= longest - 100 for d in end_delays) / len(end_delays)
    return {
        "cut_share": sum(everyone) / len(everyone),
        "end_at_max_wait_share": missed,
        "end_delay_ms_p90": float(np.percentile(end_delays, 90)),
        "cut_share_by_voice": {label: sum(c) / len(c) for label, c in cut.items()},
        "end_delay_ms_p50": statistics.median(end_delays),
        "end_delays_ms": end_delays,
    }


def render(results: dict[str, Any]) -> list[str]:
    lines = [
        f"turn cut-offs: {results['num_utterances']} utterances with a 600-900 ms mid-sentence pause; "
        f"end-of-turn model p50 {results['endpoint_ms_per_call_p50']:.1f} ms, "
        f"p95 {results['endpoint_ms_per_call_p95']:.1f} ms per call ({results['endpoint_calls']} calls)"
    ]
    voices = list(next(iter(results["modes"].values()))["cut_share_by_voice"])
    lines.append(
        f"  {'mode':<20}{'cut early':>10}{'end delay p50':>15}{'p90':>8}{'extra p50':>11}"
        f"{'ends at max wait':>18}  cut early by voice"
    )
    for mode, row in results["modes"].items():
        by_voice = "  ".join(f"{row['cut_share_by_voice'][v]:.2f}" for v in voices)
        lines.append(
            f"  {mode:<20}{row['cut_share']:10.3f}{row['end_delay_ms_p50']:13.0f}ms"
            f"{row['end_delay_ms_p90']:6.0f}ms"
            f"{row['extra_end_delay_ms_p50']:9.0f}ms{_share(row['end_at_max_wait_share']):>18}  {by_voice}"
        )
    lines.append(f"  voices: {', '.join(voices)}")
    return lines


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
