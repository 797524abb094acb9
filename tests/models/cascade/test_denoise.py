"""Input noise reduction: DeepFilterNet3 makes noisy speech measurably cleaner, length for length.

A sentence in the user's voice is mixed with pink noise at 5 dB and fed to
each tuning in 20 ms appends, as a session's stream does; the output is
aligned to the clean speech (the denoiser's lag) and its signal-to-noise ratio
compared with the input's. Only the direction and a clear margin are asserted.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from livegen.bench.recognisers import mix, pink_noise
from livegen.models.cascade import denoise
from livegen.models.voice import StreamConfig
from models.cascade.support import speak_as_user


def snr_db(clean: np.ndarray, heard: np.ndarray) -> float:
    """``heard``'s SNR against ``clean``, after the lag and gain that match them best."""
    lag = int(np.argmax(np.correlate(heard, clean, "full"))) - (len(clean) - 1)
    lag = max(0, lag)
    reference, aligned = clean[: len(clean) - lag], heard[lag:]
    gain = float(np.dot(aligned, reference) / np.dot(reference, reference))
    error = aligned - gain * reference
    return float(10 * np.log10(np.sum((gain * reference) ** 2) / np.sum(error**2)))


@pytest.mark.parametrize("kind", sorted(denoise.TUNINGS))
def test_noise_reduction_raises_the_snr_of_noisy_speech(cascade: Any, kind: str) -> None:
    speech = np.frombuffer(speak_as_user(cascade, "Book a table for four people at eight."), "<i2")
    clean = speech.astype(np.float32) / 32768.0
    noisy = mix(clean, pink_noise(len(clean), np.random.default_rng(7)), 5.0)
    pcm = (np.clip(noisy, -1, 1) * 32767).astype("<i2").tobytes()
    denoiser = denoise.Denoiser(kind)
    out = b"".join(denoiser.process(pcm[i : i + 640]) for i in range(0, len(pcm), 640))
    assert len(out) == len(pcm)
    heard = np.frombuffer(out, "<i2").astype(np.float32) / 32768.0
    assert snr_db(clean, heard) > snr_db(clean, noisy) + 5.0


def test_the_output_has_the_input_length_however_it_is_cut() -> None:
    pcm = (np.random.default_rng(1).standard_normal(16_000) * 3000).astype("<i2").tobytes()
    denoiser = denoise.Denoiser("near_field")
    sizes = [2, 62, 640, 3200, 18, 9000]  # bytes: whole samples, as the stream checks
    cuts = np.cumsum([0, *sizes, len(pcm)])
    pieces = [pcm[a:b] for a, b in itertools.pairwise(cuts) if a < len(pcm)]
    assert [len(denoiser.process(p)) for p in pieces] == [len(p) for p in pieces]


async def test_a_session_with_noise_reduction_hears_the_denoised_input(cascade: Any) -> None:
    """The stream keeps (and so detects and transcribes) the denoised audio, and only while asked."""
    noise = pink_noise(16_000, np.random.default_rng(3)) * 0.1
    pcm = (noise * 32767).astype("<i2").tobytes()
    stream = await cascade.open("nr", StreamConfig(turn_detection=None, noise_reduction="far_field"))
    try:
        for start in range(0, len(pcm), 640):
            await stream.append(0, pcm[start : start + 640])
        # What the detector and the recogniser were given (leading silence is not kept: its tail).
        start = stream._turn.start
        assert _rms(stream._turn.audio(start, len(noise))) < _rms(noise[start:]) / 4
        await stream.update(StreamConfig(turn_detection=None))
        await stream.append(0, pcm)
        start = stream._turn.start
        kept = stream._turn.audio(start, 2 * len(noise))
        assert _rms(kept) == pytest.approx(_rms(noise[start - len(noise) :]), rel=0.01)
    finally:
        await stream.aclose()


def _rms(samples: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(samples, dtype=np.float64))))
