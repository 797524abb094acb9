"""OpenAI's audio endpoints through the official ``openai`` SDK, unchanged, against livegen's embedded models.

``audio.transcriptions.create`` (plain, verbose and streamed) hears speech that
espeak-ng made apart from the server; ``audio.speech.with_streaming_response``
speaks text as the first bytes of a stream; and one livegen's speech is
another's (here the same server's) transcription input: the round trip that
lets one livegen be another's remote recogniser or voice.
"""

from __future__ import annotations

import io
import wave
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from openai import AsyncOpenAI, BadRequestError, NotFoundError

from browser.speech import write_speech
from conformance.conftest import API_KEY
from conformance.test_openai_sdk import VERSION
from livegen.server.thread import ServerThread

CLIENT = f"openai-python {VERSION}"
SAID = "Purple elephants dance slowly across the wide green field."


@pytest.fixture
async def openai(plain_server: ServerThread) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(api_key=API_KEY, base_url=f"{plain_server.http_url}/v1") as sdk:
        yield sdk


@pytest.fixture(scope="module")
def spoken(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A WAV file of ``SAID`` from a fresh espeak-ng process (not the server's speech worker)."""
    return write_speech(tmp_path_factory.mktemp("audio") / "said.wav", [(0.3, SAID)], tail_s=0.5)


def words(text: str) -> set[str]:
    return {word.strip(".,!?").lower() for word in text.split()}


@pytest.mark.conformance(client=CLIENT, capability="audio-transcriptions")
async def test_transcriptions_create_hears_the_words(openai: AsyncOpenAI, spoken: Path) -> None:
    transcription = await openai.audio.transcriptions.create(model="whisper-1", file=spoken)
    assert {"purple", "green", "field"} <= words(transcription.text), transcription.text
    assert transcription.usage is not None and transcription.usage.type == "duration"
    assert transcription.usage.seconds == pytest.approx(_duration(spoken), abs=0.05)


@pytest.mark.conformance(client=CLIENT, capability="audio-transcriptions")
async def test_verbose_json_has_timed_segments(openai: AsyncOpenAI, spoken: Path) -> None:
    verbose = await openai.audio.transcriptions.create(
        model="gpt-4o-mini-transcribe", file=spoken, response_format="verbose_json", language="en"
    )
    assert verbose.language == "english"
    assert verbose.duration == pytest.approx(_duration(spoken), abs=0.05)
    assert verbose.segments and verbose.segments[0].start == 0.0
    assert verbose.segments[-1].end == pytest.approx(verbose.duration, abs=0.01)
    assert "elephant" in verbose.text.lower()
    text = await openai.audio.transcriptions.create(model="whisper-1", file=spoken, response_format="text")
    assert "elephant" in text.lower()


@pytest.mark.conformance(client=CLIENT, capability="audio-transcriptions")
async def test_a_streamed_transcription_is_deltas_then_done_with_logprobs(
    openai: AsyncOpenAI, spoken: Path
) -> None:
    stream = await openai.audio.transcriptions.create(
        model="gpt-4o-transcribe", file=spoken, stream=True, include=["logprobs"]
    )
    events = [event async for event in stream]
    kinds = [event.type for event in events]
    assert kinds[-1] == "transcript.text.done" and set(kinds[:-1]) == {"transcript.text.delta"}, kinds
    done = events[-1]
    assert "".join(getattr(event, "delta", "") for event in events[:-1]) == done.text
    assert "elephant" in done.text.lower()
    assert done.usage is not None and done.usage.output_tokens > 0 and done.usage.input_tokens > 0
    assert done.logprobs and "".join(entry.token or "" for entry in done.logprobs).strip() == done.text
    assert all(entry.logprob is not None and entry.logprob <= 0 for entry in done.logprobs)
    streamed = [
        (entry.token, entry.logprob)
        for event in events[:-1]
        for entry in getattr(event, "logprobs", None) or []
    ]
    assert streamed == [(entry.token, entry.logprob) for entry in done.logprobs]


@pytest.mark.conformance(client=CLIENT, capability="audio-speech")
async def test_speech_streams_audio_the_recogniser_hears(openai: AsyncOpenAI) -> None:
    text = "The weather is lovely today. Let us walk along the river and watch the boats go by."
    chunks: list[bytes] = []
    async with openai.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=text, response_format="wav"
    ) as response:
        assert response.headers["content-type"] == "audio/wav"
        async for chunk in response.iter_bytes():
            chunks.append(chunk)
    data = b"".join(chunks)
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    samples = np.frombuffer(data[44:], "<i2")
    seconds = len(samples) / 24_000
    assert 3.0 < seconds < 15.0, seconds  # about 2.5 words a second
    assert np.sqrt(np.mean(samples.astype(np.float64) ** 2)) > 300  # speech, not silence
    heard = await openai.audio.transcriptions.create(model="whisper-1", file=("speech.wav", data))
    # Content words with no homophone: CI's run once heard "The weather" as "But whether".
    assert {"walk", "river", "boats"} <= words(heard.text), heard.text


@pytest.mark.conformance(client=CLIENT, capability="audio-speech")
async def test_unknown_model_and_voice_are_refused_by_name(openai: AsyncOpenAI, spoken: Path) -> None:
    with pytest.raises(NotFoundError) as no_model:
        await openai.audio.speech.create(model="tts-9", voice="alloy", input="Hello.")
    assert "tts-9" in no_model.value.message
    with pytest.raises(BadRequestError) as no_voice:
        await openai.audio.speech.create(model="tts-1", voice="bob", input="Hello.")
    assert "'bob'" in no_voice.value.message and no_voice.value.body["param"] == "voice"  # type: ignore[index]
    with pytest.raises(NotFoundError) as no_recogniser:
        await openai.audio.transcriptions.create(model="whisper-9", file=spoken)
    assert "whisper-9" in no_recogniser.value.message


def _duration(path: Path) -> float:
    with wave.open(io.BytesIO(path.read_bytes())) as reader:
        return reader.getnframes() / reader.getframerate()
