"""Wire audio: G.711 against the reference implementation, resampling by a real resampler."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from livegen.errors import InvalidRequest
from livegen.protocol.audio import (
    AudioFormat,
    Encoding,
    InputDecoder,
    OutputEncoder,
    g711_decode,
    g711_encode,
    parse_format,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    audioop = pytest.importorskip("audioop")  # the reference codec, in the stdlib up to 3.12

ALL_SAMPLES = np.arange(-32768, 32768, dtype="<i2").tobytes()
ALL_CODES = bytes(range(256))


@pytest.mark.parametrize(
    ("encoding", "encode", "decode"),
    [(Encoding.PCMU, "lin2ulaw", "ulaw2lin"), (Encoding.PCMA, "lin2alaw", "alaw2lin")],
)
def test_g711_matches_the_reference_for_every_sample_and_code(
    encoding: Encoding, encode: str, decode: str
) -> None:
    assert g711_encode(ALL_SAMPLES, encoding) == getattr(audioop, encode)(ALL_SAMPLES, 2)
    assert g711_decode(ALL_CODES, encoding) == getattr(audioop, decode)(ALL_CODES, 2)


def peak_hz(pcm: bytes, rate: int) -> float:
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    spectrum = np.abs(np.fft.rfft(samples))
    return float(np.argmax(spectrum) * rate / len(samples))


def test_streamed_resampling_keeps_the_pitch_and_the_length() -> None:
    t = np.arange(48_000) / 48_000
    tone = (np.sin(2 * np.pi * 1000 * t) * 10_000).astype("<i2").tobytes()
    decoder = InputDecoder(AudioFormat(Encoding.PCM, 48_000), 16_000)
    out = b"".join(decoder.decode(tone[i : i + 1920]) for i in range(0, len(tone), 1920))  # 20 ms chunks
    assert 0 <= 16_000 - len(out) // 2 < 480  # only the resampler's delay (< 30 ms) is held back
    assert abs(peak_hz(out, 16_000) - 1000) < 5


def test_mulaw_round_trip_through_the_session_codecs_loses_nothing() -> None:
    t = np.arange(8000) / 8000
    tone = (np.sin(2 * np.pi * 440 * t) * 12_000).astype("<i2").tobytes()
    wire_bytes = g711_encode(tone, Encoding.PCMU)
    decoder = InputDecoder(AudioFormat(Encoding.PCMU, 8000), 16_000)
    pcm16k = decoder.decode(wire_bytes) + decoder.flush()  # a commit flushes the resampler's tail
    assert abs(len(pcm16k) // 2 - 16_000) < 20
    assert abs(peak_hz(pcm16k, 16_000) - 440) < 5
    encoder = OutputEncoder(AudioFormat(Encoding.PCMA, 8000), 16_000)
    back = encoder.encode(pcm16k) + encoder.flush()  # so does the end of a response
    assert abs(len(back) - len(wire_bytes)) < 20


def test_formats_ga_beta_and_refusals() -> None:
    assert parse_format({"type": "audio/pcm", "rate": 16000}, "f") == AudioFormat(Encoding.PCM, 16000)
    assert parse_format("g711_ulaw", "f") == AudioFormat(Encoding.PCMU, 8000)
    assert parse_format("pcm16", "f") == AudioFormat(Encoding.PCM, 24000)
    assert parse_format({"type": "audio/pcma"}, "f").rate == 8000
    for bad in (
        {"type": "audio/opus"},
        {"type": "audio/pcm", "rate": 7},
        {"type": "audio/pcm", "rate": True},
        3,
    ):
        with pytest.raises(InvalidRequest):
            parse_format(bad, "f")


def test_odd_pcm16_is_refused() -> None:
    with pytest.raises(InvalidRequest) as caught:
        InputDecoder(AudioFormat(), 24_000).decode(b"\x00\x01\x02")
    assert caught.value.code == "invalid_audio_format"
