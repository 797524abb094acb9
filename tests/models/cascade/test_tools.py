"""Voice agents over the wire: the official OpenAI SDK, the cascade, and a chat endpoint that calls tools.

The server is ``livegen serve --llm-base-url`` against ``ChatServer``, a
scripted OpenAI-compatible endpoint on loopback that streams tool calls the
way vLLM (id and name first, arguments in fragments) and Ollama (each call
whole) stream them. The client is ``AsyncOpenAI().realtime``, as a user writes
it: declare a tool, ask, run the call, send its output, hear the answer.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from openai import AsyncOpenAI

from livegen.models.cascade import replies
from livegen.server.thread import ServerThread
from models.cascade.support import ChatServer, RealtimeCall, Reply, heard, wire_audio

pytestmark = pytest.mark.slow

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
PARIS = '{"city": "Paris"}'


@pytest.fixture
def llm_server(
    start_server: Callable[..., ServerThread], cascade: Any, chat_server: ChatServer
) -> Iterator[ServerThread]:
    server = start_server(world_model="none", llm_base_url=chat_server.url, llm_model="tiny")
    try:
        server.wait_ready(timeout=120)
        yield server
    finally:
        cascade.use_llm(None, None)  # the model is shared by every server of this process


def sdk(server: ServerThread) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key="unused", base_url=f"{server.http_url}/v1", websocket_base_url=f"{server.ws_url}/v1"
    )


async def agent(connection: Any, call: RealtimeCall, vad: bool = False, **session: Any) -> None:
    """Declare the weather tool (and turn detection off for text turns)."""
    detection = {"type": "server_vad"} if vad else None
    body = {"type": "realtime", "tools": [WEATHER], "audio": {"input": {"turn_detection": detection}}}
    mark = len(call.events)
    await connection.session.update(session={**body, **session})
    await call.wait_for("session.updated", after=mark)


async def ask(connection: Any, text: str, **response: Any) -> None:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    await connection.conversation.item.create(item=item)
    await connection.response.create(response=response or None)


async def answer(connection: Any, call_id: str, output: str) -> None:
    item = {"type": "function_call_output", "call_id": call_id, "output": output}
    await connection.conversation.item.create(item=item)


def said(call: RealtimeCall, response_id: str) -> str:
    return "".join(
        e.delta for e in call.of("response.output_audio_transcript.delta") if e.response_id == response_id
    )


async def test_a_spoken_question_leads_to_a_call_and_its_output_to_a_spoken_answer(
    llm_server: ServerThread, cascade: Any, chat_server: ChatServer
) -> None:
    chat_server.replies = [
        Reply(calls=(("call_w1", "get_weather", PARIS),), style="vllm", usage=(61, 9, 0)),
        Reply(("It is sunny in Paris, twenty degrees.",), usage=(80, 11, 64)),
    ]
    async with sdk(llm_server).realtime.connect(model="gpt-realtime") as connection:
        call = RealtimeCall(connection)
        await agent(connection, call, vad=True)
        call.say(wire_audio(cascade, "What is the weather in Paris?"))
        args = await call.wait_for("response.function_call_arguments.done")
        first = await call.wait_for("response.done")
        mark = len(call.events)
        await answer(connection, args.call_id, '{"sky": "sunny", "celsius": 20}')
        await connection.response.create()
        second = await call.wait_for("response.done", after=mark)
        await call.close()
    assert (args.call_id, args.name, json.loads(args.arguments)) == (
        "call_w1",
        "get_weather",
        {"city": "Paris"},
    )
    deltas = "".join(e.delta for e in call.of("response.function_call_arguments.delta"))
    assert deltas == PARIS
    [output] = first.response.output
    assert (output.type, output.call_id, output.name, output.arguments) == (
        "function_call",
        "call_w1",
        "get_weather",
        PARIS,
    )
    assert first.response.usage.input_tokens == 61 and first.response.usage.output_tokens == 9
    assert second.response.status == "completed"
    assert said(call, second.response.id) == "It is sunny in Paris, twenty degrees."
    audio = b"".join(
        base64.b64decode(e.delta)
        for e in call.of("response.output_audio.delta")
        if e.response_id == second.response.id
    )
    assert "paris" in heard(cascade, audio).lower()
    usage = second.response.usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (80, 11, 91)
    assert usage.input_token_details.cached_tokens == 64
    # The model saw its call and the output in OpenAI's chat format, and the tool each time.
    first_request, second_request = chat_server.requests[-2:]
    assert first_request["tools"][0]["function"]["name"] == "get_weather"
    assert "weather" in first_request["messages"][-1]["content"].lower()
    assistant, tool = second_request["messages"][-2:]
    assert assistant["tool_calls"][0]["id"] == "call_w1"
    assert assistant["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": PARIS}
    assert tool == {"role": "tool", "tool_call_id": "call_w1", "content": '{"sky": "sunny", "celsius": 20}'}


async def test_two_parallel_calls_outputs_in_any_order_unknown_and_duplicate_refused(
    llm_server: ServerThread, chat_server: ChatServer
) -> None:
    oslo = '{"city": "Oslo"}'
    chat_server.replies = [
        Reply(
            ("Checking both.",), (("call_p", "get_weather", PARIS), ("call_o", "get_weather", oslo)), "ollama"
        ),
        Reply(("Paris is sunny and Oslo is rainy.",)),
    ]
    async with sdk(llm_server).realtime.connect(model="gpt-realtime") as connection:
        call = RealtimeCall(connection)
        await agent(connection, call)
        await ask(connection, "Weather in Paris and Oslo?")
        first = await call.wait_for("response.done")
        mark = len(call.events)
        await answer(connection, "call_o", "rain")
        await answer(connection, "call_p", "sun")
        await answer(connection, "call_p", "sun again")
        await answer(connection, "call_nobody_made", "?")
        await connection.response.create()
        second = await call.wait_for("response.done", after=mark)
        await call.close()
    # The calls go out as soon as the model has made them, so they may come before or after the
    # words' message item; each has its own output_index, that of its place in the output.
    output = first.response.output
    assert sorted(o.type for o in output) == ["function_call", "function_call", "message"]
    assert [o.call_id for o in output if o.type == "function_call"] == ["call_p", "call_o"]
    done_args = call.of("response.function_call_arguments.done")
    assert [output[e.output_index].call_id for e in done_args] == ["call_p", "call_o"]
    errors = [e.error for e in call.events[mark:] if e.type == "error"]
    assert [(e.code, e.param) for e in errors] == [
        ("duplicate_function_call_output", "item.call_id"),
        ("unknown_call_id", "item.call_id"),
    ]
    assert said(call, second.response.id) == "Paris is sunny and Oslo is rainy."
    messages = chat_server.requests[-1]["messages"]
    assert [m["role"] for m in messages[-4:]] == ["user", "assistant", "tool", "tool"]
    assert messages[-3]["content"] == "Checking both."
    assert [(m["tool_call_id"], m["content"]) for m in messages[-2:]] == [
        ("call_o", "rain"),
        ("call_p", "sun"),
    ]


@pytest.mark.parametrize("how", ["spoken", "cancel"])
async def test_a_barge_in_between_a_call_and_its_output_abandons_the_call(
    llm_server: ServerThread, cascade: Any, chat_server: ChatServer, how: str
) -> None:
    words = ("Let me look that up for you. This may take a moment, so please bear with me while I check.",)
    chat_server.replies = [Reply(words, (("call_late", "get_weather", PARIS),))]
    chat_server.reply = ["Okay."]
    async with sdk(llm_server).realtime.connect(model="gpt-realtime") as connection:
        call = RealtimeCall(connection)
        await agent(connection, call, vad=how == "spoken")
        await ask(connection, "Weather in Paris?")
        args = await call.wait_for("response.function_call_arguments.done")
        if how == "spoken":  # the user talks over the answer before the tool is back
            call.say(wire_audio(cascade, "Stop, never mind.", lead_s=0.0))
        else:
            await connection.response.cancel()
        done = await call.wait_for("response.done", response__id=args.response_id)
        mark = len(call.events)
        await answer(connection, "call_late", "sun")
        error = await call.wait_for("error", after=mark)
        await call.close()
    assert done.response.status == "cancelled"
    assert done.response.status_details.reason == ("turn_detected" if how == "spoken" else "client_cancelled")
    [cut] = [o for o in done.response.output if o.type == "function_call"]
    assert cut.status == "incomplete"
    assert (error.error.code, error.error.param) == ("function_call_abandoned", "item.call_id")
    outputs = [e for e in call.events[mark:] if e.type == "conversation.item.added"]
    assert not [e for e in outputs if e.item.type == "function_call_output"]
    for request in chat_server.requests[1:]:  # the abandoned call never reaches the model
        assert "call_late" not in json.dumps(request["messages"])


async def test_an_out_of_band_text_response_leaves_the_history_unchanged(
    llm_server: ServerThread, chat_server: ChatServer
) -> None:
    chat_server.replies = [Reply(("Hello there.",)), Reply(("positive",)), Reply(("Fine, thanks.",))]
    async with sdk(llm_server).realtime.connect(model="gpt-realtime") as connection:
        call = RealtimeCall(connection)
        await agent(connection, call)
        await ask(connection, "Hi!")
        await call.wait_for("response.done")
        mark = len(call.events)
        oob = {
            "conversation": "none",
            "output_modalities": ["text"],
            "instructions": "Classify the user's sentiment in one word.",
            "metadata": {"topic": "sentiment"},
            "input": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "I love it"}]}
            ],
        }
        await connection.response.create(response=oob)
        side = await call.wait_for("response.done", after=mark)
        after_side = len(call.events)
        await ask(connection, "How are you?")
        await call.wait_for("response.done", after=after_side)
        await call.close()
    assert side.response.metadata == {"topic": "sentiment"} and side.response.conversation_id is None
    assert side.response.output[0].content[0].text == "positive"
    assert not [e for e in call.events[mark:after_side] if e.type.startswith("conversation.item")]
    assert not [e for e in call.of("response.output_audio.delta") if e.response_id == side.response.id]
    side_request, last_request = chat_server.requests[-2:]
    assert side_request["messages"][0]["content"] == "Classify the user's sentiment in one word."
    assert [m["content"] for m in side_request["messages"][1:]] == ["I love it"]
    assert "positive" not in [m.get("content") for m in last_request["messages"]]
    assert [m["content"] for m in last_request["messages"][1:]] == ["Hi!", "Hello there.", "How are you?"]


async def test_max_output_tokens_ends_the_response_incomplete(
    llm_server: ServerThread, chat_server: ChatServer
) -> None:
    chat_server.replies = [Reply(("The weather in Paris is",), finish_reason="length")]
    async with sdk(llm_server).realtime.connect(model="gpt-realtime") as connection:
        call = RealtimeCall(connection)
        await agent(connection, call)
        await ask(connection, "Tell me about Paris.", max_output_tokens=5)
        done = await call.wait_for("response.done")
        await call.close()
    assert done.response.status == "incomplete"
    assert done.response.status_details.reason == "max_output_tokens"
    assert chat_server.requests[-1]["max_tokens"] == 5


async def test_without_a_language_model_a_session_with_tools_says_it_cannot_call_them(
    start_server: Callable[..., ServerThread],
) -> None:
    server = start_server(world_model="none")
    server.wait_ready(timeout=120)
    async with sdk(server).realtime.connect(model="gpt-realtime") as connection:
        call = RealtimeCall(connection)
        await agent(connection, call)
        await ask(connection, "What is 12 times 7?")
        first = await call.wait_for("response.done")
        mark = len(call.events)
        await ask(connection, "Book me a table for two tonight.")
        second = await call.wait_for("response.done", after=mark)
        await call.close()
    assert said(call, first.response.id) == "12 times 7 is 84."
    assert said(call, second.response.id) == replies.NO_TOOLS
    assert second.response.status == "completed" and second.response.usage.output_tokens > 0


@pytest.mark.parametrize("truncation", ["auto", "disabled"])
async def test_a_bounded_context_drops_the_oldest_turns_never_instructions_or_tools(
    start_server: Callable[..., ServerThread], cascade: Any, chat_server: ChatServer, truncation: str
) -> None:
    server = start_server(
        world_model="none", llm_base_url=chat_server.url, llm_model="tiny", llm_context_tokens=600
    )
    chat_server.reply = ["Noted."]
    try:
        server.wait_ready(timeout=120)
        async with sdk(server).realtime.connect(model="gpt-realtime") as connection:
            call = RealtimeCall(connection)
            await agent(connection, call, instructions="Be brief.", truncation=truncation)
            for n in range(4):
                mark = len(call.events)
                await ask(connection, f"Question {n}: " + "tell me more " * 60)
                await call.wait_for("response.done", after=mark)
            await call.close()
    finally:
        cascade.use_llm(None, None)
    messages = chat_server.requests[-1]["messages"]
    assert messages[0] == {"role": "system", "content": "Be brief."}
    assert chat_server.requests[-1]["tools"][0]["function"]["name"] == "get_weather"
    asked = [m["content"][:11] for m in messages if m["role"] == "user"]
    if truncation == "disabled":
        assert asked == [f"Question {n}:" for n in range(4)]
    else:
        assert asked[-1] == "Question 3:" and "Question 0:" not in asked


def test_the_readme_agent_runs(
    start_server: Callable[..., ServerThread], cascade: Any, chat_server: ChatServer
) -> None:
    """docs/voice-models.md's agent with one tool, run as written, against livegen and a scripted endpoint."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    readme = (Path(__file__).parents[3] / "docs" / "voice-models.md").read_text()
    [code] = re.findall(
        r"<!-- tool-agent:begin -->\n```python\n(.*?)```\n<!-- tool-agent:end -->", readme, re.S
    )
    chat_server.replies = [
        Reply(calls=(("call_r", "get_weather", PARIS),), style="ollama"),
        Reply(("It is sunny in Paris.",)),
    ]
    server = start_server(world_model="none", llm_base_url=chat_server.url, llm_model="llama3.2")
    try:
        server.wait_ready(timeout=120)
        code = code.replace("http://127.0.0.1:8000", server.http_url).replace(
            "ws://127.0.0.1:8000", server.ws_url
        )
        run = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=dict(os.environ)
        )
    finally:
        cascade.use_llm(None, None)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "It is sunny in Paris.\n"
    tool = chat_server.requests[-1]["messages"][-1]
    assert tool["role"] == "tool" and json.loads(tool["content"]) == {
        "city": "Paris",
        "sky": "sunny",
        "celsius": 21,
    }
