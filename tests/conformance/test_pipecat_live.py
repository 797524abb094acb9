"""pipecat's GPT-Live service (``OpenAILiveLLMService``, pipecat-ai 1.14) against ``/v1/live/sessions``.

As ``test_pipecat.py`` drives the Realtime service, in a pipeline under a
``WorkerRunner`` with its defaults (model ``gpt-live-1``, client delegation)
but for ``base_url`` and ``api_key``: the microphone goes in as
``InputAudioRawFrame``s; what its users see is what it pushes: the user's
``TranscriptionFrame`` upstream (once 0.8 s pass without a transcript piece),
the answer's ``TTSTextFrame``s between ``TTSStartedFrame`` and
``TTSStoppedFrame``, the speech stream as ``SpeechOutputAudioRawFrame``s, and
no ``ErrorFrame`` nor logged error.
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from conformance.conftest import API_KEY
from conformance.support import QUESTION, Microphone, until
from conformance.test_pipecat import CLIENT, Bot, Recorder
from livegen.server.thread import ServerThread

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from loguru import logger
    from pipecat.frames.frames import (
        LLMContextFrame,
        SpeechOutputAudioRawFrame,
        TranscriptionFrame,
        TTSStoppedFrame,
    )
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.services.openai.live.llm import OpenAILiveLLMService
    from pipecat.workers.runner import WorkerRunner

LIVE_CLIENT = f"{CLIENT} (GPT-Live)"


@asynccontextmanager
async def live_bot(server: ServerThread) -> AsyncIterator[Bot]:
    llm = OpenAILiveLLMService(api_key=API_KEY, base_url=f"{server.ws_url}/v1/live/sessions")
    upstream, downstream = Recorder(), Recorder()
    worker = PipelineWorker(
        Pipeline([upstream, llm, downstream]), params=PipelineParams(audio_in_sample_rate=24_000)
    )
    the_bot = Bot(llm, worker, upstream, downstream)  # type: ignore[arg-type]
    sink = logger.add(lambda message: the_bot.logged.append(str(message)), level="ERROR")
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.ensure_future(runner.run())
    # The session starts on the first context, as an app's context aggregator queues it.
    context = LLMContext([{"role": "system", "content": "You are a helpful voice assistant."}])
    await worker.queue_frame(LLMContextFrame(context))
    try:
        await until(lambda: llm._session_started or the_bot.errors(), within=60, what="session.started")
        assert not the_bot.errors(), f"the session did not start: {the_bot.errors()}"
        yield the_bot
    finally:
        await worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(running, 30)
        logger.remove(sink)


@pytest.mark.conformance(client=LIVE_CLIENT, capability="spoken-turn")
async def test_spoken_turn(plain_server: ServerThread, speech: Callable[..., bytes]) -> None:
    async with live_bot(plain_server) as the_bot:
        microphone = Microphone(the_bot.send_audio)
        microphone.say(speech(QUESTION))
        await until(lambda: the_bot.of(TTSStoppedFrame) or the_bot.errors(), within=120, what="the answer")
        # The answer plays at real time: its stream goes quiet once it has all been heard (a second
        # of silence: speech made slower than real time, on a loaded machine, has shorter gaps).
        await until(lambda: _spoken(the_bot) and _quiet(the_bot, 1.0), 60, "the answer heard")
        await microphone.stop()
    assert the_bot.errors() == []
    [transcript] = the_bot.of(TranscriptionFrame)
    said = transcript.text.lower()
    assert ("12" in said or "twelve" in said) and ("7" in said or "seven" in said)
    assert "84" in the_bot.text() or "eighty" in the_bot.text().lower()
    assert _spoken(the_bot) > 48_000  # over a second of speech


def _quiet(the_bot: Bot, seconds: float) -> bool:
    """Whether the stream's last ``seconds`` are silence."""
    recent, total = [], 0
    for frame in reversed(the_bot.of(SpeechOutputAudioRawFrame)):
        recent.append(frame)
        total += len(frame.audio)
        if total >= seconds * 48_000:
            return not any(any(f.audio) for f in recent)
    return False


def _spoken(the_bot: Bot) -> int:
    """Bytes of speech (frames that are not silence) in the stream so far."""
    return sum(len(f.audio) for f in the_bot.of(SpeechOutputAudioRawFrame) if any(f.audio))
