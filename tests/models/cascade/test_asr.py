"""The choice of speech recognisers: each one hears, a session picks its own, the server's is checked.

Real recognisers on real synthesised speech (espeak-ng, a voice unlike the
assistant's); accuracy and speed are measured by ``livegen bench voice-model``,
not asserted here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from livegen.errors import ConfigError
from livegen.models.cascade import asr, assets
from livegen.models.cascade import model as cascade_model
from livegen.models.voice import OutputKind, StreamConfig
from models.cascade.support import Driver, speak_as_user

pytestmark = pytest.mark.slow


def _samples(pcm16: bytes) -> np.ndarray:
    return np.frombuffer(pcm16, "<i2").astype(np.float32) / 32768.0


@pytest.mark.parametrize("name", sorted(asr.CHOICES))
def test_each_recogniser_hears_a_spoken_question(cascade: Any, name: str) -> None:
    audio = _samples(speak_as_user(cascade, "What time is it?", trail_s=0.3))
    text = cascade.recognizer_for(name).transcribe(audio).text
    assert cascade.recognizer_for(name).name == name
    assert "time" in text.lower(), text


def test_a_prompt_is_context_not_part_of_the_transcript(cascade: Any) -> None:
    audio = _samples(speak_as_user(cascade, "What time is it?", trail_s=0.3))
    text = cascade.recognizer.transcribe(audio, prompt="Zanzibar quokka").text
    assert "time" in text.lower() and "quokka" not in text.lower(), text


async def test_a_session_picks_its_recogniser_by_transcription_model(cascade: Any) -> None:
    other = next(name for name in asr.CHOICES if name != cascade.recognizer.name)
    before = cascade.stats.asr_by_model[other]
    stream = await cascade.open("s1", StreamConfig(transcription_model=other))
    driver = Driver(stream)
    await driver.say(1, speak_as_user(cascade, "What is the date today?"))
    await driver.wait_for(OutputKind.SPEECH_STOPPED)
    await stream.commit(1, "item_1")
    done = await driver.wait_for(OutputKind.TRANSCRIPT_DONE, item_id="item_1")
    await driver.close()
    assert "date" in done.text.lower(), done.text
    assert cascade.stats.asr_by_model[other] > before


def test_openai_model_names_mean_the_servers_recogniser(cascade: Any) -> None:
    for name in ("whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe", ""):
        assert cascade.recognizer_for(name) is cascade.recognizer


def test_the_server_default_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIVEGEN_ASR_MODEL", "whisper-huge")
    with pytest.raises(ConfigError, match=r"whisper-tiny\.en"):
        cascade_model.default_asr_model()
    monkeypatch.setenv("LIVEGEN_ASR_MODEL", "whisper-base")
    assert cascade_model.default_asr_model() == "whisper-base"
    monkeypatch.delenv("LIVEGEN_ASR_MODEL")  # conftest.py pins tiny.en for the suite's speed
    assert cascade_model.default_asr_model() == asr.DEFAULT == "whisper-base"


def test_a_split_model_part_that_is_not_the_pinned_one_is_refused(tmp_path: Path) -> None:
    part = tmp_path / "model.bin.part1"
    part.write_bytes(b"not whisper")
    with pytest.raises(ConfigError, match="sha256"):
        assets.verify(assets.WHISPER_BASE[0], part)


def test_a_forced_prefix_starts_the_transcript_and_whisper_goes_on_from_it(cascade: Any) -> None:
    audio = _samples(speak_as_user(cascade, "What is the date today?", trail_s=0.3))
    text = cascade.recognizer.transcribe(audio, prefix="What is the plate").text
    assert text.startswith("What is the plate") and "today" in text.lower(), text


def test_logprobs_score_each_token_of_a_transcript_and_the_right_words_score_higher(cascade: Any) -> None:
    audio = _samples(speak_as_user(cascade, "What time is it?", trail_s=0.3))
    recognizer = cascade.recognizer
    text = recognizer.transcribe(audio).text
    scored = recognizer.logprobs(audio, text)
    assert "".join(entry.token for entry in scored).strip() == text
    assert all(entry.logprob <= 0 for entry in scored)
    wire = scored[0].to_wire()
    assert bytes(wire["bytes"]).decode() == wire["token"]
    wrong = recognizer.logprobs(audio, "Purple elephants dance slowly.")

    def mean(entries: list[asr.Logprob]) -> float:
        return sum(entry.logprob for entry in entries) / len(entries)

    assert mean(scored) > mean(wrong) + 1.0
    assert recognizer.logprobs(audio, "  ") == []


@pytest.mark.parametrize("seconds", [0.0, 0.3, 2.5, 9.4, 9.95, 10.0, 14.0])
def test_features_of_short_audio_are_those_of_the_whole_padded_window(cascade: Any, seconds: float) -> None:
    """Only the audio and a little silence are transformed; the rest of the window is the floor."""
    audio = np.random.default_rng(3).standard_normal(int(seconds * asr.SAMPLE_RATE)).astype(np.float32)
    for window in asr.WINDOWS_S:
        padded = np.zeros(window * asr.SAMPLE_RATE, np.float32)
        padded[: len(audio)] = 0.05 * audio[: len(padded)]
        whole = cascade.recognizer._whisper.feature_extractor(padded, padding=0)[:, : window * 100]
        features = cascade.recognizer._features(0.05 * audio, window)
        assert features.shape == whole.shape
        np.testing.assert_allclose(features, whole, rtol=0, atol=1e-6)


def test_scoring_audio_just_decoded_reuses_its_encoding(
    cascade: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The barge-in check decodes a held sound, then scores the words against it: one encoder pass."""
    recognizer = cascade.recognizer
    audio = _samples(speak_as_user(cascade, "Wait, what time is it?", lead_s=0.0, trail_s=0.0))[:4800]
    fresh = recognizer.logprobs(audio.copy(), "wait")  # before anything of this audio was kept
    model = recognizer._whisper.model
    encodes: list[int] = []

    class Counting:
        def __getattr__(self, name: str) -> Any:
            return getattr(model, name)

        def encode(self, features: Any) -> Any:
            encodes.append(1)
            return model.encode(features)

    monkeypatch.setattr(recognizer._whisper, "model", Counting())
    held = audio + np.float32(1e-4)  # audio no decode has seen
    text = recognizer.transcribe(held).text
    scored = recognizer.logprobs(held, text)
    assert len(encodes) == 1 and text.strip(), text
    again = recognizer.logprobs(audio, "wait")
    assert len(encodes) == 1  # kept from the first scoring too
    assert [t.token for t in again] == [t.token for t in fresh]
    np.testing.assert_allclose([t.logprob for t in again], [t.logprob for t in fresh], atol=1e-3)
    assert scored
