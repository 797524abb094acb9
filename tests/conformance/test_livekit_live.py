"""LiveKit's ``GPTLiveModel`` (livekit-agents 1.8.9, ``livekit.plugins.openai.realtime``) against
``/v1/live/sessions``.

The model as ``AgentSession(llm=GPTLiveModel(...))`` takes it: wrapped in the
``DuplexRealtimeAdapter`` that ``AgentSession`` wraps every duplex model in
(livekit/agents/voice/agent_session.py), its session configured as
``AgentActivity`` configures it (``_update_session`` with the agent's
instructions, chat context and tools, which releases ``session.start``), with
its defaults otherwise (model ``gpt-live-1``, Responses delegation) but for
``base_url`` and ``api_key``. No LiveKit server is needed at this level, as in
``test_livekit.py``. What its users see: the ``generation_created`` events (the
adapter cuts the output stream into replies by its own audio gate, and attaches
transcript pieces by ``start_ms``), ``input_audio_transcription_completed``, and
no ``error`` nor logged error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import aiohttp
import pytest
from livekit.agents import llm
from livekit.agents.llm.duplex_adapter import DuplexRealtimeAdapter
from livekit.plugins.openai.realtime import GPTLiveModel

from conformance.conftest import API_KEY
from conformance.support import QUESTION, Microphone, until
from conformance.test_livekit import CLIENT, Agent, _Collect
from livegen.server.thread import ServerThread

LIVE_CLIENT = f"{CLIENT} (GPTLiveModel)"


@asynccontextmanager
async def live_agent(server: ServerThread) -> AsyncIterator[Agent]:
    async with aiohttp.ClientSession() as http:
        model = DuplexRealtimeAdapter(
            GPTLiveModel(base_url=f"{server.http_url}/v1", api_key=API_KEY, http_session=http)
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
            # As AgentActivity starts a realtime session: the whole configuration at once.
            await the_agent.session._update_session(
                instructions="You are a helpful voice assistant.", chat_ctx=llm.ChatContext.empty(), tools=[]
            )
            yield the_agent
        finally:
            await the_agent.session.aclose()
            for task in the_agent.tasks:
                task.cancel()
            await asyncio.gather(*the_agent.tasks, return_exceptions=True)
            await model.aclose()
            logging.getLogger("livekit").removeHandler(handler)


@pytest.mark.conformance(client=LIVE_CLIENT, capability="spoken-turn")
async def test_spoken_turn(plain_server: ServerThread, speech: Callable[..., bytes]) -> None:
    async with live_agent(plain_server) as the_agent:
        microphone = Microphone(the_agent.send_audio)
        microphone.say(speech(QUESTION))
        await until(
            lambda: [g for g in the_agent.generations if g.done and g.text] or the_agent.problems(),
            within=120,
            what="the answer",
        )
        await microphone.stop()
    assert the_agent.problems() == []
    said = " ".join(the_agent.transcripts).lower()
    assert ("12" in said or "twelve" in said) and ("7" in said or "seven" in said)
    [answer] = [g for g in the_agent.generations if g.text]
    assert "84" in answer.text or "eighty" in answer.text.lower()
    assert answer.audio_bytes > 48_000  # over a second of speech
