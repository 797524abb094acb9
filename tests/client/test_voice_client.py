"""``VoiceClient`` and ``livegen talk`` against a real server.

The fast tests serve the scripted voice model (``tests/voice/scripted.py``),
which transcribes a turn as the milliseconds it heard, so they check that a
whole WAV reached the model as one turn at its own rate. The slow test asks
the embedded cascade a spoken question and checks the spoken answer.
"""

from __future__ import annotations

import json
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from livegen.cli import main
from livegen.cli.talk import read_wav, write_wav
from livegen.client.voice import OUTPUT_RATE, VoiceClient, VoiceError
from livegen.server.thread import ServerThread
from voice.scripted import registry


@pytest.fixture
def voice_server(start_server: Callable[..., ServerThread]) -> ServerThread:
    server = start_server(registry=registry(), voice_model="scripted-voice", world_model="none")
    server.wait_ready(timeout=30)
    return server


def tone_wav(path: Path, seconds: float, rate: int, channels: int = 1, width: int = 2) -> Path:
    t = np.arange(int(seconds * rate)) / rate
    wave_ = np.sin(2 * np.pi * 300 * t) * 0.3
    dtype, scale, offset = {1: (np.uint8, 127, 128), 2: ("<i2", 32767, 0), 4: ("<i4", 2**31 - 1, 0)}[width]
    samples = (wave_ * scale + offset).astype(dtype)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(width)
        out.setframerate(rate)
        out.writeframes(np.repeat(samples, channels).tobytes())
    return path


@pytest.mark.parametrize(("channels", "width"), [(1, 2), (2, 2), (1, 1), (2, 4)])
def test_read_wav_gives_pcm16_mono_at_the_files_rate(tmp_path: Path, channels: int, width: int) -> None:
    pcm, rate = read_wav(tone_wav(tmp_path / "in.wav", 0.5, 22_050, channels, width))
    samples = np.frombuffer(pcm, "<i2")
    assert rate == 22_050 and len(samples) == 11_025
    assert 9000 < np.abs(samples).max() < 10_500  # 0.3 of full scale, whatever the sample width


async def test_a_wav_is_one_turn_at_its_own_rate(voice_server: ServerThread, tmp_path: Path) -> None:
    pcm, rate = read_wav(tone_wav(tmp_path / "q.wav", 2.5, 8_000))
    async with await VoiceClient.connect(voice_server.ws_url) as client:
        answer = await client.ask_audio(pcm, rate)
    assert answer.user_transcript == "2500 ms"  # all of it, as one turn, resampled from 8 kHz
    assert answer.status == "completed"
    assert answer.transcript == "hello from livegen"
    assert answer.audio_s == pytest.approx(0.6, abs=0.05)
    assert answer.first_audio_s is not None


async def test_a_text_turn_has_no_user_transcript(voice_server: ServerThread) -> None:
    async with await VoiceClient.connect(voice_server.ws_url) as client:
        answer = await client.ask_text("hello")
        again = await client.ask_text("and again")
    assert answer.user_transcript is None and again.status == answer.status == "completed"
    assert len(answer.audio) > 0


async def test_a_refusal_raises_with_the_servers_code(voice_server: ServerThread) -> None:
    with pytest.raises(VoiceError) as refused:
        await VoiceClient.connect(voice_server.ws_url, model="no-such-model")
    assert refused.value.code == "model_not_found"


def test_talk_writes_the_answer_and_prints_both_sides(voice_server: ServerThread, tmp_path: Path) -> None:
    question = tone_wav(tmp_path / "q.wav", 1.0, 16_000, channels=2)
    out = tmp_path / "answer.wav"
    args = ["talk", str(question), "--out", str(out), "--url", voice_server.ws_url, "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["heard"] == "1000 ms" and report["answer"] == "hello from livegen"
    with wave.open(str(out)) as answer:
        assert answer.getframerate() == OUTPUT_RATE and answer.getnframes() == pytest.approx(
            0.6 * OUTPUT_RATE, rel=0.1
        )


def test_talk_says_why_it_cannot_reach_a_server(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["talk", "--text", "hi", "--url", "ws://127.0.0.1:9", "--out", str(tmp_path / "a.wav")]
    )
    assert result.exit_code == 1 and "cannot reach ws://127.0.0.1:9" in result.output


def test_talk_wants_exactly_one_question(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["talk"])
    assert result.exit_code == 2 and "give a WAV file or --text" in result.output


@pytest.mark.slow
def test_talk_to_the_embedded_cascade(server: ServerThread, tmp_path: Path) -> None:
    from browser.speech import write_question

    question = write_question(tmp_path / "q.wav", "what is twelve times seven", lead_s=1.0, tail_s=1.0)
    out = tmp_path / "answer.wav"
    result = CliRunner().invoke(
        main, ["talk", str(question), "--out", str(out), "--url", server.ws_url, "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert "12" in report["heard"] or "twelve" in report["heard"].lower()
    assert "84" in report["answer"] or "eighty-four" in report["answer"].lower()
    pcm, rate = read_wav(out)
    assert rate == OUTPUT_RATE and np.abs(np.frombuffer(pcm, "<i2")).max() > 1000  # spoken, not silence
    assert report["audio_s"] > 0.5


def test_write_then_read_round_trips(tmp_path: Path) -> None:
    pcm = (np.arange(480) * 50).astype("<i2").tobytes()
    write_wav(tmp_path / "x.wav", pcm, 24_000)
    assert read_wav(tmp_path / "x.wav") == (pcm, 24_000)
