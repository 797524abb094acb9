"""The default voice model end to end: a real server, the official OpenAI SDK, spoken turns.

``livegen serve`` with no options serves the cascade; these tests start the
same server on a free port, talk to it with ``AsyncOpenAI().realtime`` under
server VAD, with a microphone that streams 20 ms of audio every 20 ms (speech
in a voice unlike the assistant's, silence between), and check that a spoken
question gets its transcript and a spoken, relevant answer, and that the
answer can be interrupted.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest
from openai import AsyncOpenAI

from livegen.server.thread import ServerThread
from models.cascade.support import ChatServer, RealtimeCall, heard, wire_audio

pytestmark = pytest.mark.slow


def sdk(server: ServerThread) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key="unused", base_url=f"{server.http_url}/v1", websocket_base_url=f"{server.ws_url}/v1"
    )


async def test_the_default_voice_model_is_the_cascade(default_server: ServerThread) -> None:
    async with sdk(default_server).realtime.connect(model="gpt-realtime") as connection:
        created = await connection.recv()
    assert created.type == "session.created"
    assert default_server.app.state.livegen.voice_model.name == "cascade"


async def test_a_spoken_question_gets_its_transcript_and_a_spoken_answer(
    default_server: ServerThread, cascade: Any
) -> None:
    async with sdk(default_server).realtime.connect(model="gpt-realtime") as connection:
        call = RealtimeCall(connection)
        call.say(wire_audio(cascade, "What is twelve times seven?"))
        done = await call.wait_for("response.done")
        await call.close()
    assert done.response.status == "completed"
    kinds = [e.type for e in call.events]
    assert kinds.index("input_audio_buffer.speech_started") < kinds.index("input_audio_buffer.speech_stopped")
    [transcript] = call.of("conversation.item.input_audio_transcription.completed")
    assert "12" in transcript.transcript and "7" in transcript.transcript
    said = "".join(e.delta for e in call.of("response.output_audio_transcript.delta"))
    assert said == "12 times 7 is 84."
    audio = b"".join(base64.b64decode(e.delta) for e in call.of("response.output_audio.delta"))
    assert len(audio) / 48_000 > 0.8
    assert "84" in heard(cascade, audio)


async def test_the_answer_can_be_interrupted(default_server: ServerThread, cascade: Any) -> None:
    async with sdk(default_server).realtime.connect(model="gpt-realtime") as connection:
        call = RealtimeCall(connection)
        call.say(wire_audio(cascade, "What can you do?"))
        first = await call.wait_for("response.created")
        await call.wait_for("response.output_audio.delta", response_id=first.response.id)
        mark = len(call.events)
        call.say(wire_audio(cascade, "What time is it?", lead_s=0.0))
        await call.wait_for("input_audio_buffer.speech_started", after=mark)
        cancelled = await call.wait_for("response.done", response__id=first.response.id)
        second = await call.wait_for("response.done", after=mark, response__status="completed")
        await call.close()
    assert cancelled.response.status == "cancelled"
    assert cancelled.response.status_details.reason == "turn_detected"
    # Nothing of the interrupted answer comes after its terminal event.
    end = call.events.index(cancelled)
    assert not [e for e in call.events[end + 1 :] if getattr(e, "response_id", None) == first.response.id]
    answer = "".join(
        e.delta
        for e in call.of("response.output_audio_transcript.delta")
        if e.response_id == second.response.id
    )
    assert answer.startswith("It's ")


async def test_llm_options_make_a_language_model_answer(
    start_server: Callable[..., ServerThread], cascade: Any, chat_server: ChatServer
) -> None:
    chat_server.reply = ["Paris is the capital", " of France."]
    server = start_server(world_model="none", llm_base_url=chat_server.url, llm_model="tiny")
    try:
        server.wait_ready(timeout=120)
        async with sdk(server).realtime.connect(model="gpt-realtime") as connection:
            call = RealtimeCall(connection)
            call.say(wire_audio(cascade, "What is the capital of France?"))
            done = await call.wait_for("response.done")
            await call.close()
    finally:
        cascade.use_llm(None, None)  # the model is shared by every server of this process
    assert done.response.status == "completed"
    said = "".join(e.delta for e in call.of("response.output_audio_transcript.delta"))
    assert said == "Paris is the capital of France."
    request = chat_server.requests[-1]
    assert request["model"] == "tiny"
    assert "capital of france" in request["messages"][-1]["content"].lower()
