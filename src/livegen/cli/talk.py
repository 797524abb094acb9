"""``livegen talk``: one spoken (or typed) turn against a running server, the answer saved as a WAV.

The command a user reaches for to check a server end to end without a
browser: a WAV file in, the spoken answer out as a WAV, both transcripts and
the time to first audio printed. It is a thin shell over
``livegen.client.voice.VoiceClient``; WAV reading and writing live here
because only the command deals in files.
"""

from __future__ import annotations

import asyncio
import json
import wave
from pathlib import Path
from typing import Any

import click
import numpy as np

from livegen.client.voice import OUTPUT_RATE, Answer, VoiceClient, VoiceError


def read_wav(path: Path) -> tuple[bytes, int]:
    """PCM16 mono and its rate from a WAV of 8, 16 or 32-bit integer samples (channels averaged)."""
    with wave.open(str(path), "rb") as source:
        width, channels, rate = source.getsampwidth(), source.getnchannels(), source.getframerate()
        raw = source.readframes(source.getnframes())
    dtypes = {1: "u1", 2: "<i2", 4: "<i4"}
    if width not in dtypes:
        raise click.BadParameter(
            f"{path}: {8 * width}-bit samples; use 8, 16 or 32-bit PCM", param_hint="WAV"
        )
    samples = np.frombuffer(raw, dtypes[width]).astype(np.float64)
    samples = {1: (samples - 128) * 256, 2: samples, 4: samples / 65536}[width]
    mono = samples.reshape(-1, channels).mean(axis=1)
    return np.clip(mono, -32768, 32767).astype("<i2").tobytes(), rate


def write_wav(path: Path, pcm: bytes, rate: int = OUTPUT_RATE) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm)


async def _talk(url: str, api_key: str | None, wav: Path | None, text: str | None, **session: Any) -> Answer:
    async with await VoiceClient.connect(url, api_key=api_key, **session) as client:
        if text is not None:
            return await client.ask_text(text)
        assert wav is not None
        return await client.ask_audio(*read_wav(wav))


@click.command()
@click.argument("wav", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--text", default=None, help="Ask in text instead of a WAV file.")
@click.option(
    "--out",
    default="answer.wav",
    show_default=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where the spoken answer is written (PCM16 mono, 24 kHz).",
)
@click.option("--url", default="ws://127.0.0.1:8000", show_default=True, help="The server (ws:// or wss://).")
@click.option(
    "--api-key", envvar="LIVEGEN_API_KEY", default=None, help="The server's key [env: LIVEGEN_API_KEY]."
)
@click.option("--model", default=None, help="Voice model to ask for [default: the server's].")
@click.option("--voice", default=None, help="Output voice, e.g. 'alloy' or 'espeak'.")
@click.option("--instructions", default=None, help="Session instructions for the model.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def talk(
    wav: Path | None, text: str | None, out: Path, url: str, api_key: str | None, **options: Any
) -> None:
    """Say WAV (or --text) to a voice session and save the spoken answer to --out.

    The whole WAV is one turn (manual turn-taking), so pauses inside it do not
    end it. Prints what the server heard, the answer's transcript and the time
    from the end of the turn to the first answer audio.
    """
    if (wav is None) == (text is None):
        raise click.UsageError("give a WAV file or --text, not both")
    as_json = options.pop("as_json")
    session = _session_fields(**options)
    try:
        answer = asyncio.run(_talk(url, api_key, wav, text, **session))
    except VoiceError as exc:
        raise click.ClickException(f"the server refused: {exc}") from exc
    except OSError as exc:
        raise click.ClickException(f"cannot reach {url}: {exc}") from exc
    write_wav(out, answer.audio)
    _report(answer, out, as_json)
    if answer.status != "completed":
        raise SystemExit(1)


def _session_fields(model: str | None, voice: str | None, instructions: str | None) -> dict[str, Any]:
    session: dict[str, Any] = {"model": model}
    if voice is not None:
        session["audio"] = {"output": {"voice": voice}}
    if instructions is not None:
        session["instructions"] = instructions
    return session


def _report(answer: Answer, out: Path, as_json: bool) -> None:
    figures = {
        "heard": answer.user_transcript,
        "answer": answer.transcript,
        "status": answer.status,
        "audio_s": round(answer.audio_s, 3),
        "first_audio_ms": None if answer.first_audio_s is None else round(answer.first_audio_s * 1000),
        "out": str(out),
    }
    if as_json:
        click.echo(json.dumps(figures))
        return
    if answer.user_transcript is not None:
        click.echo(f"you:       {answer.user_transcript}")
    click.echo(f"assistant: {answer.transcript}")
    first = (
        "no audio" if answer.first_audio_s is None else f"first audio after {figures['first_audio_ms']} ms"
    )
    click.echo(f"[{answer.status}; {answer.audio_s:.1f} s of audio in {out}; {first}]")
