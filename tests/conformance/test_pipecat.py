"""pipecat's ``OpenAIRealtimeLLMService`` (pipecat-ai, pinned in pyproject.toml) against ``livegen serve``.

The service runs as its users run it: in a pipecat pipeline, under a
``WorkerRunner``, with its default settings (model ``gpt-realtime-2.1``,
server VAD) except ``base_url`` and ``api_key``. Microphone audio goes in as
``InputAudioRawFrame``s, text turns as the ``LLMContextFrame`` that pipecat's
context aggregator sends. What its users see are the frames it pushes
(``TranscriptionFrame`` upstream, ``TTSAudioRawFrame`` and ``TTSTextFrame``
downstream, ``ErrorFrame`` on failure) and its loguru log.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import warnings
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from conformance.certs import Certificates
from conformance.conftest import API_KEY
from conformance.support import (
    INTERRUPTION,
    LONG_QUESTION,
    QUESTION,
    TEXT_QUESTION,
    Microphone,
    refusals,
    until,
)
from livegen.server.thread import ServerThread

CLIENT = "pipecat 1.14.0"

# pipecat imports the stdlib's audioop, deprecated since 3.11: its warning is not ours to fail on.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from loguru import logger
    from pipecat.frames.frames import (
        ErrorFrame,
        Frame,
        InputAudioRawFrame,
        LLMContextFrame,
        TranscriptionFrame,
        TTSAudioRawFrame,
        TTSStartedFrame,
        TTSStoppedFrame,
        TTSTextFrame,
    )
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.services.openai.realtime import events
    from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
    from pipecat.workers.runner import WorkerRunner


class Recorder(FrameProcessor):
    """Keeps every frame but the microphone's, as an app's own processor would see them."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[Frame] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if not isinstance(frame, InputAudioRawFrame):
            self.frames.append(frame)
        await self.push_frame(frame, direction)


@dataclass
class Bot:
    llm: OpenAIRealtimeLLMService
    worker: PipelineWorker
    upstream: Recorder
    downstream: Recorder
    logged: list[str] = field(default_factory=list)

    def of(self, kind: type[Frame], after: int | None = None) -> list[Any]:
        """Frames of a kind; with ``after``, only those pushed downstream after that mark."""
        frames = (
            self.downstream.frames[after:]
            if after is not None
            else self.upstream.frames + self.downstream.frames
        )
        return [f for f in frames if isinstance(f, kind)]

    def errors(self) -> list[str]:
        return [f.error for f in self.of(ErrorFrame)] + self.logged

    def text(self, after: int = 0) -> str:
        return "".join(f.text for f in self.downstream.frames[after:] if isinstance(f, TTSTextFrame))

    async def send_audio(self, pcm: bytes) -> None:
        await self.worker.queue_frame(InputAudioRawFrame(audio=pcm, sample_rate=24_000, num_channels=1))


@asynccontextmanager
async def bot(server: ServerThread, properties: events.SessionProperties | None = None) -> AsyncIterator[Bot]:
    # pipecat's defaults (model gpt-realtime-2.1, server VAD), but for the server's URL and key;
    # ``properties`` as pipecat's docs set them.
    settings = (
        None if properties is None else OpenAIRealtimeLLMService.Settings(session_properties=properties)
    )
    llm = OpenAIRealtimeLLMService(
        api_key=API_KEY, base_url=f"{server.ws_url}/v1/realtime", settings=settings
    )
    upstream, downstream = Recorder(), Recorder()
    worker = PipelineWorker(
        Pipeline([upstream, llm, downstream]), params=PipelineParams(audio_in_sample_rate=24_000)
    )
    the_bot = Bot(llm, worker, upstream, downstream)
    sink = logger.add(lambda message: the_bot.logged.append(str(message)), level="ERROR")
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.ensure_future(runner.run())
    try:
        await until(lambda: llm._api_session_ready or the_bot.errors(), within=60, what="session.updated")
        assert not the_bot.errors(), f"the session did not start: {the_bot.errors()}"
        yield the_bot
    finally:
        await worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(running, 30)
        logger.remove(sink)


@pytest.mark.conformance(client=CLIENT, capability="spoken-turn")
async def test_spoken_turn(plain_server: ServerThread, speech: Callable[..., bytes]) -> None:
    async with bot(plain_server) as the_bot:
        microphone = Microphone(the_bot.send_audio)
        microphone.say(speech(QUESTION))
        await until(lambda: the_bot.of(TTSStoppedFrame) or the_bot.errors(), within=120, what="the answer")
        await microphone.stop()
    assert the_bot.errors() == []
    [transcript] = the_bot.of(TranscriptionFrame)
    assert "12" in transcript.text and "7" in transcript.text
    assert "84" in the_bot.text()
    assert sum(len(f.audio) for f in the_bot.of(TTSAudioRawFrame)) > 48_000


@pytest.mark.conformance(client=CLIENT, capability="spoken-turn")
async def test_spoken_turn_with_pipecats_default_transcription(
    plain_server: ServerThread, speech: Callable[..., bytes]
) -> None:
    # pipecat's docs turn transcripts on with ``InputAudioTranscription()``, whose default model is
    # ``gpt-realtime-whisper``: refused invalid_value, its session never heard (issue 37, item 14).
    transcription = events.InputAudioTranscription()
    assert transcription.model == "gpt-realtime-whisper"  # pipecat's own default, not chosen here
    audio = events.AudioConfiguration(input=events.AudioInput(transcription=transcription))
    async with bot(plain_server, events.SessionProperties(audio=audio)) as the_bot:
        microphone = Microphone(the_bot.send_audio)
        microphone.say(speech(QUESTION))
        await until(lambda: the_bot.of(TTSStoppedFrame) or the_bot.errors(), within=120, what="the answer")
        await microphone.stop()
    assert the_bot.errors() == []
    [transcript] = the_bot.of(TranscriptionFrame)
    assert "12" in transcript.text and "7" in transcript.text
    assert "84" in the_bot.text()


@pytest.mark.conformance(client=CLIENT, capability="barge-in")
async def test_barge_in(plain_server: ServerThread, speech: Callable[..., bytes]) -> None:
    async with bot(plain_server) as the_bot:
        microphone = Microphone(the_bot.send_audio)
        microphone.say(speech(LONG_QUESTION))
        await until(lambda: the_bot.of(TTSAudioRawFrame) or the_bot.errors(), within=120, what="answer audio")
        mark = len(the_bot.downstream.frames)
        microphone.say(speech(INTERRUPTION, lead_s=0.0))

        def answered() -> bool:
            return bool(re.search(r"\d:\d\d", the_bot.text(after=mark)) and the_bot.of(TTSStoppedFrame, mark))

        await until(lambda: answered() or the_bot.errors(), within=120, what="the second answer")
        await microphone.stop()
    assert the_bot.errors() == []
    # The interrupted answer's audio stopped with a TTSStartedFrame of the new answer after it.
    assert len(the_bot.of(TTSStartedFrame)) == 2
    first_answer = the_bot.text()[: len(the_bot.text()) - len(the_bot.text(after=mark))]
    assert first_answer.startswith("I can") and not re.search(r"\d:\d\d", first_answer)


@pytest.mark.conformance(client=CLIENT, capability="text-turn")
async def test_text_turn(plain_server: ServerThread) -> None:
    async with bot(plain_server) as the_bot:
        context = LLMContext(messages=[{"role": "user", "content": TEXT_QUESTION}])
        await the_bot.worker.queue_frame(LLMContextFrame(context))
        await until(lambda: the_bot.of(TTSStoppedFrame) or the_bot.errors(), within=120, what="the answer")
    assert the_bot.errors() == []
    assert "4" in the_bot.text()
    assert the_bot.of(TTSAudioRawFrame)


@pytest.mark.conformance(client=CLIENT, capability="unknown-item")
async def test_unknown_item_retrieve(plain_server: ServerThread) -> None:
    async with bot(plain_server) as the_bot:
        # pipecat's own API: the retrieve fails with the server's message, and the session goes on.
        with pytest.raises(Exception) as failed:
            await asyncio.wait_for(the_bot.llm.retrieve_conversation_item("item_nope"), 30)
        assert not isinstance(failed.value, asyncio.TimeoutError), "the retrieve was never answered"
        context = LLMContext(messages=[{"role": "user", "content": TEXT_QUESTION}])
        await the_bot.worker.queue_frame(LLMContextFrame(context))
        await until(lambda: the_bot.of(TTSStoppedFrame) or the_bot.errors(), within=120, what="the answer")
    assert the_bot.errors() == []
    assert "4" in the_bot.text()


@pytest.mark.conformance(
    client=CLIENT,
    capability="unknown-item",
    na="delete: pipecat has no API to delete a conversation item (it deletes none itself)",
)
def test_unknown_item_delete_has_no_api() -> None:
    methods = {name for name in dir(OpenAIRealtimeLLMService) if "delete" in name.lower()}
    assert methods == set()


@pytest.mark.conformance(client=CLIENT, capability="idle-cancel")
async def test_idle_cancel(plain_server: ServerThread) -> None:
    before = refusals(plain_server, "response_cancel_not_active")
    async with bot(plain_server) as the_bot:
        await the_bot.llm.send_client_event(events.ResponseCancelEvent())
        await until(lambda: refusals(plain_server, "response_cancel_not_active") > before, what="the refusal")
        context = LLMContext(messages=[{"role": "user", "content": TEXT_QUESTION}])
        await the_bot.worker.queue_frame(LLMContextFrame(context))
        await until(lambda: the_bot.of(TTSStoppedFrame) or the_bot.errors(), within=120, what="the answer")
    assert the_bot.errors() == []  # pipecat drops response_cancel_not_active by its code
    assert "4" in the_bot.text()


@pytest.mark.conformance(client=CLIENT, capability="tls")
async def test_tls(
    tls_server: ServerThread, certificates: Certificates, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pipecat dials with Python's default TLS context: a deployment trusts a private CA through OpenSSL's
    # SSL_CERT_FILE (without it, this fails with CERTIFICATE_VERIFY_FAILED).
    monkeypatch.setenv("SSL_CERT_FILE", str(certificates.ca_file))
    async with bot(tls_server) as the_bot:
        context = LLMContext(messages=[{"role": "user", "content": TEXT_QUESTION}])
        await the_bot.worker.queue_frame(LLMContextFrame(context))
        await until(lambda: the_bot.of(TTSStoppedFrame) or the_bot.errors(), within=120, what="the answer")
    assert the_bot.errors() == []
    assert "4" in the_bot.text() and the_bot.llm.base_url.startswith("wss://")
