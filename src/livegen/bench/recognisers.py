"""The recognisers side by side: word error rate by voice and noise, real-time factor, and how
soon each gives a turn's final transcript.

Part of ``livegen bench voice-model``. The held-out set is sentences that
neither the responder's rules nor the turn benchmark's questions were written
from, spoken by several voices: espeak-ng formant voices with different
accents and pitches, and the assistant's own Piper voice (the one voice near
the assistant's). Each clip is heard clean and with noise at 10 dB and 5 dB
signal-to-noise ratio. The noise is made here, from a fixed seed, so every
run and every recogniser hears the same set: pink (1/f) noise, steady like
a fan or a car, which masks speech frequencies more than white noise does.

Each recogniser decodes every clip the way a session would (its short
window); the real-time factor is compute seconds per second of audio, the
median over the clips.

The final transcript is timed on a session's stream, as a user meets it: each
clean clip of ``LATENCY_VOICES`` is fed at the pace of speech under server VAD,
and the time is from the stream's ``speech_stopped`` (the silence window has
run) to its final transcript (``final_latency``). Decoding starts at a pause,
while the window runs (speculation), so this is less than a whole decode.

Live captions are timed on a session's stream: a few long sentences fed at
the pace of speech with input transcription on; for each word, from where it
ends in the audio (``word_ends``) to the first transcription delta that
holds it, live or final.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from livegen.bench.voice_turns import MODEL_RATE, WIRE_RATE

#: Never used to write a rule or a test: held out.
HELD_OUT = (
    "Please repeat after me, purple elephants dance slowly.",
    "What is seven plus five?",
    "Book a table for four people at eight tonight.",
    "The quick brown fox jumps over the lazy dog.",
    "Remind me to call my sister on Thursday afternoon.",
    "How many kilometres is it from Paris to Berlin?",
    "Turn the kitchen lights down to thirty percent.",
    "My flight leaves at a quarter past nine tomorrow morning.",
    "Can you spell the word necessary for me?",
    "She sells sea shells by the sea shore.",
    "What is twenty three times four?",
    "I would like a large coffee with oat milk, please.",
)
#: (label, voice as ``CascadeModel.speak`` takes it). espeak-ng's are far from the assistant's Piper.
VOICES = (
    ("espeak en-us m2", "espeak:en-us+m2"),
    ("espeak en-gb-scotland f3", "espeak:en-gb-scotland+f3"),
    ("espeak en-029 m4", "espeak:en-029+m4"),
    ("piper joe (assistant's)", ""),
)
#: Signal-to-noise ratios in dB; None is clean.
NOISE_LEVELS: tuple[float | None, ...] = (None, 10.0, 5.0)
SEED = 15
#: The voices whose clean clips time the final transcript: one far from Whisper's training data
#: and the assistant's own. Each clip is a turn fed in real time, so not every voice: 24 turns
#: take about two minutes per recogniser.
LATENCY_VOICES = ("espeak en-us m2", "piper joe (assistant's)")


@dataclass(frozen=True)
class Clip:
    text: str
    voice: str
    snr_db: float | None
    audio: np.ndarray


def noise_label(snr_db: float | None) -> str:
    return "clean" if snr_db is None else f"{snr_db:g} dB"


def pink_noise(n: int, rng: np.random.Generator) -> np.ndarray:
    """Noise whose power falls as 1/f, unit RMS."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    spectrum /= np.sqrt(np.maximum(1.0, np.arange(len(spectrum))))
    noise = np.fft.irfft(spectrum, n)
    unit: np.ndarray = (noise / (np.sqrt(np.mean(noise**2)) + 1e-12)).astype(np.float32)
    return unit


def mix(speech: np.ndarray, noise: np.ndarray, snr_db: float) -> np.ndarray:
    """``speech`` plus ``noise`` scaled to ``snr_db`` against the speech's active part."""
    active = speech[np.abs(speech) > 0.01]
    power = float(np.mean((active if active.size else speech) ** 2))
    scale = np.sqrt(power / (10 ** (snr_db / 10)) / (float(np.mean(noise**2)) + 1e-12))
    mixed: np.ndarray = np.clip(speech + scale * noise[: len(speech)], -1, 1).astype(np.float32)
    return mixed


def build_set(model: Any) -> list[Clip]:
    """Every held-out sentence in every voice, clean and at each noise level."""
    import soxr

    rng = np.random.default_rng(SEED)
    clips: list[Clip] = []
    for label, voice in VOICES:
        spoken = [_speak(model, text, voice, soxr) for text in HELD_OUT]
        for text, speech in zip(HELD_OUT, spoken, strict=True):
            gap = np.zeros(MODEL_RATE // 5, np.float32)
            speech = np.concatenate([gap, speech, gap])
            for snr_db in NOISE_LEVELS:
                if snr_db is None:
                    clips.append(Clip(text, label, None, speech.astype(np.float32)))
                    continue
                noise = pink_noise(len(speech), rng)
                clips.append(Clip(text, label, snr_db, mix(speech, noise, snr_db)))
    return clips


def _speak(model: Any, text: str, voice: str, soxr: Any) -> np.ndarray:
    pcm = model.speak(text, voice).result(timeout=120).pcm
    samples = np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0
    return np.asarray(soxr.resample(samples, WIRE_RATE, MODEL_RATE), np.float32)


def measure(model: Any, clips: Sequence[Clip], names: Sequence[str]) -> dict[str, Any]:
    """{recogniser: {"wer": {voice: {noise: wer}}, "wer_all", "rtf", "num_words"}}."""
    from livegen.bench.voice_model import normalise, percentiles, wer

    results: dict[str, Any] = {}
    for name in names:
        recognizer = model.recognizer_for(name)
        recognizer.transcribe(np.zeros(MODEL_RATE // 2, np.float32))  # warm
        pairs: dict[tuple[str, str], list[tuple[str, str]]] = {}
        ratios: list[float] = []
        for clip in clips:
            began = time.perf_counter()
            text = recognizer.transcribe(clip.audio).text
            ratios.append((time.perf_counter() - began) / (len(clip.audio) / MODEL_RATE))
            pairs.setdefault((clip.voice, noise_label(clip.snr_db)), []).append((clip.text, text))
        table: dict[str, dict[str, float]] = {}
        for (voice, noise), items in pairs.items():
            table.setdefault(voice, {})[noise] = wer(items)
        by_noise = {
            level: wer([p for (_, noise), items in pairs.items() if noise == level for p in items])
            for level in map(noise_label, NOISE_LEVELS)
        }
        captions = asyncio.run(caption_latency(model, name))
        finals = asyncio.run(final_latency(model, name, _timed(clips)))
        results[name] = {
            "final_ms": percentiles(finals),
            "caption_ms": percentiles(captions),
            "wer": table,
            "wer_by_noise": by_noise,
            "wer_all": wer([p for items in pairs.values() for p in items]),
            "rtf_p50": statistics.median(ratios),
            "num_words": sum(len(normalise(c.text)) for c in clips),
            "num_clips": len(clips),
        }
    return results


def _timed(clips: Sequence[Clip]) -> list[Clip]:
    return [clip for clip in clips if clip.snr_db is None and clip.voice in LATENCY_VOICES]


def render(results: dict[str, Any]) -> list[str]:
    levels = [noise_label(level) for level in NOISE_LEVELS]
    lines = [
        "recognisers side by side: word error rate (all voices and noise levels), speech_stopped ->",
        f"final transcript on a session's stream (clean, {', '.join(LATENCY_VOICES)})",
        f"  {'recogniser':<20}{'WER':>7}{'final p50':>11}{'final p95':>11}{'turns':>7}{'RTF p50':>9}",
    ]
    for name, result in results.items():
        final = result["final_ms"]
        lines.append(
            f"  {name:<20}{result['wer_all']:7.3f}{final.get('p50', float('nan')):9.0f} ms"
            f"{final.get('p95', float('nan')):8.0f} ms{final['n']:7d}{result['rtf_p50']:9.3f}"
        )
    lines.append("recognisers: word error rate by voice and noise, real-time factor (median)")
    for name, result in results.items():
        caption = result["caption_ms"]
        lines.append(
            f"  {name}: WER {result['wer_all']:.3f} over {result['num_words']} words, "
            f"RTF p50 {result['rtf_p50']:.3f}, live captions (word end -> first delta holding it) "
            f"p50 {caption.get('p50', float('nan')):.0f} ms, p95 {caption.get('p95', float('nan')):.0f} ms"
        )
        lines.append(f"    {'voice':<26}" + "".join(f"{level:>9}" for level in levels))
        for voice, row in result["wer"].items():
            cells = "".join(f"{row.get(level, float('nan')):9.3f}" for level in levels)
            lines.append(f"    {voice:<26}{cells}")
        by_noise = result["wer_by_noise"]
        lines.append(f"    {'all voices':<26}" + "".join(f"{by_noise[level]:9.3f}" for level in levels))
    return lines


# -- live captions ------------------------------------------------------------------------------

#: Spoken for the caption timing: long enough for several live decodes each.
CAPTIONED = (
    "Please repeat after me, purple elephants dance slowly across the wide green field.",
    "Remind me to call my sister on Thursday afternoon about the birthday dinner.",
    "My flight leaves at a quarter past nine tomorrow morning from the north terminal.",
)


def word_ends(model: Any, text: str, voice: str) -> list[float]:
    """Seconds from the start of ``text`` spoken alone to the end of each of its words.

    espeak-ng says a sentence's first k words the same way with or without the
    rest, up to the final fall of the voice, so the length of each prefix
    spoken alone is where its last word ends (within a few tens of ms).
    """
    import soxr

    words = text.split()
    return [_speech_s(_speak(model, " ".join(words[: k + 1]), voice, soxr)) for k in range(len(words))]


def _speech_s(audio: np.ndarray) -> float:
    loud = np.flatnonzero(np.abs(audio) > 0.01)
    return float(loud[-1] + 1) / MODEL_RATE if loud.size else 0.0


async def caption_latency(model: Any, name: str, voice: str = "espeak:en-us+m2") -> list[float]:
    """Per word: from its end in the audio to the first transcription delta holding it, in ms."""
    import soxr

    latencies: list[float] = []
    for index, text in enumerate(CAPTIONED):
        ends = word_ends(model, text, voice)
        speech = _speak(model, text, voice, soxr)[: int(ends[-1] * MODEL_RATE)]
        audio = np.clip(np.concatenate([speech, np.zeros(MODEL_RATE, np.float32)]), -1, 1)
        pcm = (audio * 32767).astype("<i2").tobytes()
        turn = await _captioned_turn(model, name, f"captions-{index}", pcm)
        latencies += _per_word(turn.arrivals, [turn.started + end for end in ends])
    return latencies


async def final_latency(model: Any, name: str, clips: Sequence[Clip]) -> list[float]:
    """Per clip, one turn each: ms from the stream's ``speech_stopped`` to its final transcript."""
    latencies: list[float] = []
    for index, clip in enumerate(clips):
        # A second of silence after the speech: past the silence window, so the turn ends.
        audio = np.clip(np.concatenate([clip.audio, np.zeros(MODEL_RATE, np.float32)]), -1, 1)
        turn = await _captioned_turn(model, name, f"final-{index}", (audio * 32767).astype("<i2").tobytes())
        latencies.append(1000 * (turn.done_at - turn.stopped_at))
    return latencies


@dataclass
class _Turn:
    """One captioned turn: when its audio started, (time, delta) arrivals, when the detector said
    speech stopped and when the final transcript came (``time.perf_counter``)."""

    started: float = 0.0
    arrivals: list[tuple[float, str]] = field(default_factory=list)
    stopped_at: float = 0.0
    done_at: float = 0.0


async def _captioned_turn(model: Any, name: str, session_id: str, pcm: bytes) -> _Turn:
    """One turn with input transcription under server VAD."""
    from livegen.models.voice import OutputKind, StreamConfig, TurnDetection

    config = StreamConfig(turn_detection=TurnDetection(), transcription_model=name)
    stream = await model.open(session_id, config)
    turn = _Turn()
    done = asyncio.Event()

    async def read() -> None:
        async for output in stream.outputs():
            if output.kind is OutputKind.TRANSCRIPT_DELTA:
                turn.arrivals.append((time.perf_counter(), output.text))
            elif output.kind is OutputKind.SPEECH_STOPPED:
                turn.stopped_at = turn.stopped_at or time.perf_counter()
                await stream.commit(1, "item")
            elif output.kind is OutputKind.TRANSCRIPT_DONE:
                turn.done_at = turn.done_at or time.perf_counter()
                done.set()

    reader = asyncio.ensure_future(read())
    turn.started = await _paced(stream, pcm)
    async with asyncio.timeout(60):
        await done.wait()
    await stream.aclose()
    await reader
    return turn


async def _paced(stream: Any, pcm: bytes) -> float:
    """Feed ``pcm`` in 20 ms chunks at the pace of speech; when the first chunk went."""
    chunk = MODEL_RATE * 20 // 1000 * 2
    started = time.perf_counter()
    for index, start in enumerate(range(0, len(pcm), chunk)):
        await asyncio.sleep(max(0.0, started + index * 0.02 - time.perf_counter()))
        await stream.append(1, pcm[start : start + chunk])
    return started


def _per_word(arrivals: list[tuple[float, str]], ends: list[float]) -> list[float]:
    """For each word (by position), the ms from its end to the delta that brought it."""
    latencies: list[float] = []
    count = 0
    for at, delta in arrivals:
        for _ in delta.split():
            if count < len(ends):
                latencies.append(1000 * (at - ends[count]))
            count += 1
    return latencies
