"""``livegen bench audio-api``: OpenAI's audio endpoints as the official SDK sees them.

A real server on a loopback port serves the cascade; the ``openai`` SDK asks:

- ``audio.speech.with_streaming_response.create`` of a two-sentence text
  (``pcm``): time to the first audio byte, and to the last;
- ``audio.transcriptions.create`` of a 5 s clip (espeak-ng's speech, made by
  the cascade's own speech worker, padded with silence to 5 s): the
  real-time factor, wall time over the clip's length, request to answer.

Each is asked ``--rounds`` times, one at a time, after one warm-up; the
median and p95 are printed with the load average (the cores may be shared).
"""

from __future__ import annotations

import asyncio
import io
import os
import statistics
import time
import wave
from typing import Any

import click
import numpy as np

TEXT = "The train to the coast leaves at nine in the morning. Bring a coat, it will be cold by the sea."
CLIP_TEXT = "Please book a table for four people at the Italian place on Friday evening."
CLIP_S = 5.0


def _clip(cascade: Any) -> bytes:
    """A 5 s WAV (16 kHz) of ``CLIP_TEXT`` in espeak-ng's voice, padded or cut to exactly 5 s."""
    import soxr

    pcm = cascade.speak(CLIP_TEXT, "espeak:en-us+m2").result(timeout=120).pcm
    samples = soxr.resample(np.frombuffer(pcm, "<i2").astype(np.float32) / 32768, 24_000, 16_000)
    audio = np.zeros(int(CLIP_S * 16_000), np.float32)
    start = int(0.3 * 16_000)
    piece = samples[: len(audio) - start]
    audio[start : start + len(piece)] = piece
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(16_000)
        writer.writeframes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())
    return out.getvalue()


async def _rounds(base_url: str, clip: bytes, rounds: int) -> dict[str, list[float]]:
    from openai import AsyncOpenAI

    times: dict[str, list[float]] = {"first byte": [], "last byte": [], "rtf": []}
    async with AsyncOpenAI(api_key="unused", base_url=base_url) as client:
        for _ in range(rounds):
            started = time.perf_counter()
            async with client.audio.speech.with_streaming_response.create(
                model="tts-1", voice="alloy", input=TEXT, response_format="pcm"
            ) as response:
                first = None
                async for _chunk in response.iter_bytes():
                    first = first or time.perf_counter() - started
            times["first byte"].append(first or 0.0)
            times["last byte"].append(time.perf_counter() - started)
            started = time.perf_counter()
            await client.audio.transcriptions.create(model="whisper-1", file=("clip.wav", clip))
            times["rtf"].append((time.perf_counter() - started) / CLIP_S)
    return times


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


@click.command("audio-api")
@click.option("--rounds", default=5, show_default=True, type=click.IntRange(1), help="Requests of each kind.")
def command(rounds: int) -> None:
    """Benchmark /v1/audio/speech (time to first audio byte), /v1/audio/transcriptions (real-time factor)."""
    from livegen.models.cascade import model as cascade
    from livegen.server.config import ServerConfig
    from livegen.server.thread import ServerThread

    click.echo("loading the cascade (Whisper, speech workers)...", err=True)
    loaded = cascade.load()
    clip = _clip(loaded)
    server = ServerThread(ServerConfig(api_key=None, voice_model="cascade", world_model="none")).start()
    try:
        server.wait_ready(timeout=300)
        asyncio.run(_rounds(f"{server.http_url}/v1", clip, 1))  # warm up
        times = asyncio.run(_rounds(f"{server.http_url}/v1", clip, rounds))
    finally:
        server.stop()
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    click.echo(f"audio-api: {rounds} rounds, one request at a time; load average {load}")
    for name in ("first byte", "last byte"):
        values = [value * 1000 for value in times[name]]
        click.echo(f"  speech, {name}: median {statistics.median(values):.0f} ms, p95 {_p95(values):.0f} ms")
    rtf = times["rtf"]
    click.echo(
        f"  transcription of a {CLIP_S:g} s clip: real-time factor median {statistics.median(rtf):.3f}, "
        f"p95 {_p95(rtf):.3f}"
    )
