"""The recognisers side by side: word error rate by voice and noise, and real-time factor.

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
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
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
    from livegen.bench.voice_model import normalise, wer

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
        results[name] = {
            "wer": table,
            "wer_by_noise": by_noise,
            "wer_all": wer([p for items in pairs.values() for p in items]),
            "rtf_p50": statistics.median(ratios),
            "num_words": sum(len(normalise(c.text)) for c in clips),
            "num_clips": len(clips),
        }
    return results


def render(results: dict[str, Any]) -> list[str]:
    levels = [noise_label(level) for level in NOISE_LEVELS]
    lines = ["recognisers: word error rate by voice and noise, real-time factor (median)"]
    for name, result in results.items():
        lines.append(
            f"  {name}: WER {result['wer_all']:.3f} over {result['num_words']} words, "
            f"RTF p50 {result['rtf_p50']:.3f}"
        )
        lines.append(f"    {'voice':<26}" + "".join(f"{level:>9}" for level in levels))
        for voice, row in result["wer"].items():
            cells = "".join(f"{row.get(level, float('nan')):9.3f}" for level in levels)
            lines.append(f"    {voice:<26}{cells}")
        by_noise = result["wer_by_noise"]
        lines.append(f"    {'all voices':<26}" + "".join(f"{by_noise[level]:9.3f}" for level in levels))
    return lines
