"""LiveKit's openai realtime plugin (livekit-plugins-openai, pinned) against ``livegen serve``.

``openai.realtime.RealtimeModel(base_url=..., api_key=..., http_session=...)``
with its defaults otherwise (model ``gpt-realtime``, server VAD), and its
``RealtimeSession``: ``push_audio``, ``generate_reply``, ``update_chat_ctx``,
``interrupt``, ``truncate``. No LiveKit server is needed at this level. Where
LiveKit's ``AgentSession`` reacts to the session's events, the test reacts as
it does (livekit/agents/voice/agent_activity.py: ``input_speech_started`` ->
``interrupt()``). What its users see: the session's events (``generation_created``
with text and audio streams, ``input_audio_transcription_completed``,
``error``) and the ``livekit`` loggers.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from livekit import rtc
from livekit.agents import llm
from livekit.plugins import openai

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

CLIENT = "livekit-plugins-openai 1.8.9"


@dataclass
class Generation:
    text: str = ""
    audio_bytes: int = 0
    message_ids: list[str] = field(default_factory=list)
    done: bool = False


@dataclass
class Agent:
    """One realtime session and what its events told the app."""

    session: Any
    generations: list[Generation] = field(default_factory=list)
    transcripts: list[str] = field(default_factory=list)
    errors: list[Any] = field(default_factory=list)
    logged: list[str] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def problems(self) -> list[str]:
        return [str(e.error) for e in self.errors] + self.logged

    def send_audio(self, pcm: bytes) -> None:
        samples = len(pcm) // 2
        self.session.push_audio(
            rtc.AudioFrame(pcm, sample_rate=24_000, num_channels=1, samples_per_channel=samples)
        )

    def on_generation(self, event: llm.GenerationCreatedEvent) -> None:
        generation = Generation()
        self.generations.append(generation)
        self.tasks.append(asyncio.ensure_future(self._consume(event, generation)))

    async def _consume(self, event: llm.GenerationCreatedEvent, generation: Generation) -> None:
        async def text(stream: Any) -> None:
            async for piece in stream:
                generation.text += str(piece)

        async def audio(stream: Any) -> None:
            async for frame in stream:
                generation.audio_bytes += len(frame.data.tobytes())

        async for message in event.message_stream:
            generation.message_ids.append(message.message_id)
            await asyncio.gather(text(message.text_stream), audio(message.audio_stream))
        generation.done = True


class _Collect(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.ERROR)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


@asynccontextmanager
async def agent(server: ServerThread, connector: aiohttp.BaseConnector | None = None) -> AsyncIterator[Agent]:
    async with aiohttp.ClientSession(connector=connector) as http:
        model = openai.realtime.RealtimeModel(
            base_url=f"{server.http_url}/v1", api_key=API_KEY, http_session=http
        )
        the_agent = Agent(model.session())
        handler = _Collect(the_agent.logged)
        logging.getLogger("livekit").addHandler(handler)
        the_agent.session.on("generation_created", the_agent.on_generation)
        the_agent.session.on("error", the_agent.errors.append)
        the_agent.session.on(
            "input_audio_transcription_completed",
            lambda event: the_agent.transcripts.append(event.transcript) if event.is_final else None,
        )
        try:
            yield the_agent
        finally:
            await the_agent.session.aclose()
            for task in the_agent.tasks:
                task.cancel()
            await asyncio.gather(*the_agent.tasks, return_exceptions=True)
            await model.aclose()
            logging.getLogger("livekit").removeHandler(handler)
    # aiohttp's advice for a graceful shutdown: TLS transports finish closing just after the session.
    await asyncio.sleep(0.25)


async def ask_in_text(the_agent: Agent, text: str) -> Generation:
    """As AgentSession.generate_reply(user_input=...): the message into the chat context, then a reply."""
    # Problems seen before (a test's expected refusals) must not end the wait for the reply.
    seen = len(the_agent.problems())
    chat = the_agent.session.chat_ctx.copy()
    chat.add_message(role="user", content=text)
    await the_agent.session.update_chat_ctx(chat)
    await asyncio.wait_for(the_agent.session.generate_reply(), 30)
    generation = the_agent.generations[-1]
    await until(lambda: generation.done or len(the_agent.problems()) > seen, within=120, what="the reply")
    return generation


@pytest.mark.conformance(client=CLIENT, capability="spoken-turn")
async def test_spoken_turn(plain_server: ServerThread, speech: Callable[..., bytes]) -> None:
    async with agent(plain_server) as the_agent:
        microphone = Microphone(the_agent.send_audio)
        microphone.say(speech(QUESTION))
        await until(
            lambda: (the_agent.generations and the_agent.generations[0].done) or the_agent.problems(),
            within=120,
            what="the answer",
        )
        await microphone.stop()
    assert the_agent.problems() == []
    [transcript] = the_agent.transcripts
    assert "12" in transcript and "7" in transcript
    [answer] = the_agent.generations
    assert "84" in answer.text and answer.audio_bytes > 48_000


@pytest.mark.conformance(client=CLIENT, capability="barge-in")
async def test_barge_in(plain_server: ServerThread, speech: Callable[..., bytes]) -> None:
    async with agent(plain_server) as the_agent:
        # As AgentSession does on the server's speech detection (agent_activity._on_input_speech_started).
        the_agent.session.on("input_speech_started", lambda _: the_agent.session.interrupt())
        microphone = Microphone(the_agent.send_audio)
        microphone.say(speech(LONG_QUESTION))
        await until(
            lambda: (the_agent.generations and the_agent.generations[0].audio_bytes) or the_agent.problems(),
            within=120,
            what="answer audio",
        )
        microphone.say(speech(INTERRUPTION, lead_s=0.0))

        def answered() -> bool:
            later = the_agent.generations[1:]
            return bool(later and later[-1].done and re.search(r"\d:\d\d", later[-1].text))

        await until(lambda: answered() or the_agent.problems(), within=120, what="the second answer")
        await microphone.stop()
    assert the_agent.problems() == []  # LiveKit drops OpenAI's "Cancellation failed" and nothing else
    first = the_agent.generations[0]
    assert first.done and not re.search(r"\d:\d\d", first.text)  # the long answer ended, cut short


@pytest.mark.conformance(client=CLIENT, capability="text-turn")
async def test_text_turn(plain_server: ServerThread) -> None:
    async with agent(plain_server) as the_agent:
        answer = await ask_in_text(the_agent, TEXT_QUESTION)
    assert the_agent.problems() == []
    assert "4" in answer.text and answer.audio_bytes > 0


@pytest.mark.conformance(client=CLIENT, capability="unknown-item")
async def test_unknown_item(plain_server: ServerThread) -> None:
    async with agent(plain_server) as the_agent:
        # truncate() of a message nothing was heard of deletes it; here the id is unknown to the server.
        the_agent.session.truncate(message_id="item_nope", modalities=["audio"], audio_end_ms=0)
        the_agent.session.send_event({"type": "conversation.item.retrieve", "item_id": "item_nope"})
        await until(lambda: len(the_agent.errors) >= 2, within=30, what="two errors")
        codes = sorted(e.error.body.code for e in the_agent.errors)
        recoverable = [e.recoverable for e in the_agent.errors]
        answer = await ask_in_text(the_agent, TEXT_QUESTION)  # the session goes on
    # LiveKit shows a server's refusal as a recoverable error event: OpenAI's codes, which apps match.
    assert codes == ["item_delete_invalid_item_id", "item_retrieve_invalid_item_id"]
    assert recoverable == [True, True]
    assert "4" in answer.text


@pytest.mark.conformance(client=CLIENT, capability="idle-cancel")
async def test_idle_cancel(plain_server: ServerThread) -> None:
    before = refusals(plain_server, "response_cancel_not_active")
    async with agent(plain_server) as the_agent:
        the_agent.session.interrupt()  # LiveKit's own API sends nothing with no generation running
        the_agent.session.send_event({"type": "response.cancel"})
        await until(lambda: refusals(plain_server, "response_cancel_not_active") > before, what="the refusal")
        answer = await ask_in_text(the_agent, TEXT_QUESTION)
    assert the_agent.problems() == []  # dropped by OpenAI's message, "Cancellation failed: ..."
    assert "4" in answer.text


@pytest.mark.conformance(client=CLIENT, capability="tls")
async def test_tls(tls_server: ServerThread, certificates: Certificates) -> None:
    # A LiveKit app trusts a private CA through the aiohttp session it hands the model.
    connector = aiohttp.TCPConnector(ssl=certificates.client_context())
    async with agent(tls_server, connector) as the_agent:
        received: list[str] = []
        the_agent.session.on("openai_server_event_received", lambda event: received.append(event["type"]))
        await until(lambda: "session.updated" in received or the_agent.problems(), what="session.updated")
    assert the_agent.problems() == []
    assert tls_server.ws_url.startswith("wss://")
