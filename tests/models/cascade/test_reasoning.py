"""gpt-realtime-2's reasoning over the wire: the effort reaches the model, the thinking never the client.

The server is ``livegen serve --llm-base-url`` against ``ChatServer`` (a scripted
OpenAI-compatible endpoint on loopback) playing a reasoning model: it thinks in
``reasoning_content`` deltas (vLLM's reasoning parsers, DeepSeek) and inline in
``<think>…</think>`` with its tags split across chunks (a model served without
a parser). The client is the official SDK. Nothing of the thinking may reach
speech, the transcript, an event, or the history the model is given next.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from livegen.server.thread import ServerThread
from models.cascade.support import ChatServer, RealtimeCall, Reply, heard
from models.cascade.test_tools import agent, ask, llm_server, said, sdk

pytestmark = pytest.mark.slow
__all__ = ["llm_server"]  # the fixture, shared with the tool tests

#: Words only the thinking holds: none may appear anywhere the client can see.
SECRET = "zanzibar"
ANSWER = "The capital of France is Paris."


async def test_a_reasoning_models_thinking_never_reaches_the_client(
    llm_server: ServerThread, cascade: Any, chat_server: ChatServer
) -> None:
    chat_server.replies = [
        Reply(
            ("<thi", f"nk>Let me recall, {SECRET}. The", " user asks about France.</th", "ink>\n\n", ANSWER),
            thinking=(f"Thinking of {SECRET} first.", " Then the answer."),
        ),
        Reply(("You are welcome.",)),
    ]
    async with sdk(llm_server).realtime.connect(model="gpt-realtime-2") as connection:
        call = RealtimeCall(connection)
        await agent(connection, call, reasoning={"effort": "low"})
        updated = call.of("session.updated")[-1]
        await ask(connection, "What is the capital of France?")
        first = await call.wait_for("response.done")
        mark = len(call.events)
        await ask(connection, "Thank you.", reasoning={"effort": "high"})
        second = await call.wait_for("response.done", after=mark)
        await call.close()
    assert (first.response.status, second.response.status) == ("completed", "completed")
    assert said(call, first.response.id) == ANSWER
    [output] = first.response.output
    assert output.content[0].transcript == ANSWER
    wire = json.dumps([event.model_dump() for event in call.events])
    assert SECRET not in wire and "think" not in wire.lower()
    audio = b"".join(
        base64.b64decode(e.delta)
        for e in call.of("response.output_audio.delta")
        if e.response_id == first.response.id
    )
    assert "paris" in heard(cascade, audio).lower()
    first_request, second_request = chat_server.requests[-2:]
    # The session's effort, then the response's own, as chat completions names it.
    assert (first_request["reasoning_effort"], second_request["reasoning_effort"]) == ("low", "high")
    assistant = [m for m in second_request["messages"] if m["role"] == "assistant"]
    assert [m["content"] for m in assistant] == [ANSWER]
    assert updated.session.reasoning.effort == "low"  # echoed as set


async def test_an_unknown_effort_is_refused_by_name_and_the_session_goes_on(llm_server: ServerThread) -> None:
    async with sdk(llm_server).realtime.connect(model="gpt-realtime-2") as connection:
        call = RealtimeCall(connection)
        await connection.session.update(session={"type": "realtime", "reasoning": {"effort": "maximal"}})
        error = await call.wait_for("error")
        await agent(connection, call, reasoning={"effort": "minimal"})
        updated = call.of("session.updated")[-1]
        await call.close()
    assert (error.error.type, error.error.code, error.error.param) == (
        "invalid_request_error",
        "invalid_value",
        "session.reasoning.effort",
    )
    assert "'maximal'" in error.error.message and "'xhigh'" in error.error.message
    assert updated.session.reasoning.effort == "minimal"
