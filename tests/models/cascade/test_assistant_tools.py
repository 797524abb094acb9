"""The embedded assistant's function tools, on the real Qwen2.5-Coder-1.5B-Instruct, over /v1/realtime.

Slow (the model is 1.1 GB and decodes about 8 tokens a second on a core). A session declares
``get_weather(city)``; a spoken "What's the weather in Paris?" becomes a Realtime function call
naming it with the city Paris, well formed because the answer is held to a grammar
(``tool_grammar``); the call's output, sent back, is answered in words; and a plain question in
the same session is answered in words, with no call.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai import AsyncOpenAI

from livegen.server.thread import ServerThread
from models.cascade.support import NEEDS_QWEN, RealtimeCall, wire_audio

pytestmark = [pytest.mark.slow, NEEDS_QWEN]
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city"}},
        "required": ["city"],
    },
}


async def _typed_turn(call: RealtimeCall, item: dict[str, Any]) -> Any:
    mark = len(call.events)
    await call.connection.conversation.item.create(item=item)
    await call.connection.response.create()
    return await call.wait_for("response.done", within=180, after=mark)


async def test_a_spoken_request_calls_the_tool_and_a_plain_question_is_answered(
    assistant: ServerThread, cascade: Any
) -> None:
    sdk = AsyncOpenAI(
        api_key="unused", base_url=f"{assistant.http_url}/v1", websocket_base_url=f"{assistant.ws_url}/v1"
    )
    async with sdk.realtime.connect(model="gpt-realtime") as connection:
        call = RealtimeCall(connection)
        await connection.session.update(session={"type": "realtime", "tools": [WEATHER]})
        await call.wait_for("session.updated")
        call.say(wire_audio(cascade, "What's the weather in Paris?"))
        asked = await call.wait_for("response.done", within=180)
        arguments = await call.wait_for(
            "response.function_call_arguments.done", response_id=asked.response.id
        )
        output = {"city": "Paris", "forecast": "light rain", "celsius": 14}
        told = await _typed_turn(
            call,
            {"type": "function_call_output", "call_id": arguments.call_id, "output": json.dumps(output)},
        )
        text = {"type": "input_text", "text": "What is the capital of Japan?"}
        plain = await _typed_turn(call, {"type": "message", "role": "user", "content": [text]})
        await call.close()
    assert asked.response.status == "completed"
    assert arguments.name == "get_weather"
    assert json.loads(arguments.arguments)["city"].lower() == "paris", arguments.arguments
    assert [item.type for item in asked.response.output] == ["function_call"]
    assert told.response.status == "completed"
    answer = call.said(told.response.id).lower()
    assert "rain" in answer or "14" in answer or "fourteen" in answer, answer
    assert plain.response.status == "completed"
    assert [item.type for item in plain.response.output] == ["message"]  # words, not a call
    assert "tokyo" in call.said(plain.response.id).lower()
