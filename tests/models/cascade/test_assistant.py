"""The embedded assistant, on the real Qwen2.5-Coder-1.5B-Instruct: spoken conversations.

Slow (the model is 1.1 GB and decodes about 8 tokens a second on a core): each test speaks to a
real server whose cascade answers with it, and checks what it said for meaning, by a word the
answer must hold, never its exact wording. A spoken question is answered; a follow-up needs the
answer before it; a spoken request calls the session's declared tool, and the tool's output is
answered; an action it cannot take is declined honestly; a barge-in cuts the answer.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai import AsyncOpenAI

from livegen.server.thread import ServerThread
from models.cascade.support import NEEDS_QWEN, RealtimeCall, wire_audio

pytestmark = [pytest.mark.slow, NEEDS_QWEN]


def _sdk(server: ServerThread) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key="unused", base_url=f"{server.http_url}/v1", websocket_base_url=f"{server.ws_url}/v1"
    )


async def _turn(call: RealtimeCall, cascade: Any, text: str) -> tuple[Any, str]:
    mark = len(call.events)
    call.say(wire_audio(cascade, text))
    done = await call.wait_for("response.done", within=180, after=mark)
    return done, call.said(done.response.id)


async def _typed_turn(call: RealtimeCall, text: str) -> tuple[Any, str]:
    """A typed user message and ``response.create``: the turn's words reach the model exactly."""
    mark = len(call.events)
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    await call.connection.conversation.item.create(item=item)
    await call.connection.response.create()
    done = await call.wait_for("response.done", within=180, after=mark)
    return done, call.said(done.response.id)


async def test_a_question_and_a_follow_up_that_needs_the_answer(
    assistant: ServerThread, cascade: Any
) -> None:
    # The question is spoken, the follow-up typed: what is tested is the conversation's memory, and a
    # misheard follow-up (CI once heard "that city in" as "not sitting in") would test the recogniser.
    async with _sdk(assistant).realtime.connect(model="gpt-realtime") as connection:
        call = RealtimeCall(connection)
        first, capital = await _turn(call, cascade, "What is the capital of Japan?")
        second, follow_up = await _typed_turn(call, "And what country is that city in?")
        await call.close()
    assert first.response.status == second.response.status == "completed"
    assert "tokyo" in capital.lower()
    assert "japan" in follow_up.lower()


async def test_an_action_it_cannot_take_is_declined_honestly(assistant: ServerThread, cascade: Any) -> None:
    async with _sdk(assistant).realtime.connect(model="gpt-realtime") as connection:
        call = RealtimeCall(connection)
        done, said = await _turn(call, cascade, "Please turn on the kitchen lights.")
        await call.close()
    assert done.response.status == "completed"
    lowered = said.lower().replace("’", "'")
    assert any(word in lowered for word in ("can't", "cannot", "unable", "not able")), said
    assert "i'll turn" not in lowered and "turned on" not in lowered, said


async def test_a_barge_in_cuts_the_answer(assistant: ServerThread, cascade: Any) -> None:
    async with _sdk(assistant).realtime.connect(model="gpt-realtime") as connection:
        call = RealtimeCall(connection)
        call.say(wire_audio(cascade, "Tell me a long story about a dragon and a knight."))
        first = await call.wait_for("response.created", within=180)
        await call.wait_for("response.output_audio.delta", within=180, response_id=first.response.id)
        mark = len(call.events)
        call.say(wire_audio(cascade, "What time is it?", lead_s=0.0))
        cut = await call.wait_for("response.done", within=180, response__id=first.response.id)
        second = await call.wait_for("response.done", within=180, after=mark, response__status="completed")
        await call.close()
    assert cut.response.status == "cancelled"
    assert cut.response.status_details.reason == "turn_detected"
    assert call.said(second.response.id).startswith("It's ")  # the clock's exact answer
