"""The language-model client against a real local HTTP server speaking OpenAI's streaming format."""

from __future__ import annotations

from typing import Any

import pytest

from livegen.errors import ModelError
from livegen.models.cascade import llm
from livegen.models.voice import HistoryTurn, Usage
from models.cascade.support import ChatServer, Reply

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


async def _events(client: llm.Client, chat: list[dict[str, Any]], **ask: Any) -> list[llm.Event]:
    try:
        return [event async for event in client.stream(chat, **ask)]
    finally:
        await client.aclose()


async def _collect(client: llm.Client, chat: list[dict[str, Any]]) -> list[str]:
    return [e for e in await _events(client, chat) if isinstance(e, str)]


async def test_streams_the_deltas_in_order(chat_server: ChatServer) -> None:
    chat_server.reply = ["Paris", " is the", " capital."]
    settings = llm.Settings(chat_server.url, "tiny", api_key="sk-test")
    # The first answer of an endpoint not yet known comes whole (it may think with a bare
    # </think>: chat_stream.ThinkFilter); once it answered without one, answers stream.
    first = await _collect(llm.Client(settings), [{"role": "user", "content": "Capital of France?"}])
    deltas = await _collect(llm.Client(settings), [{"role": "user", "content": "Capital of France?"}])
    assert first == ["Paris is the capital."]
    assert deltas == ["Paris", " is the", " capital."]
    request = chat_server.requests[-1]
    assert request["path"] == "/v1/chat/completions"
    assert request["stream"] is True and request["model"] == "tiny"
    assert request["auth"] == "Bearer sk-test"


async def test_an_error_status_is_a_model_error_with_the_body(chat_server: ChatServer) -> None:
    chat_server.status = 404
    client = llm.Client(llm.Settings(chat_server.url, "missing"))
    with pytest.raises(ModelError, match=r"404.*no such model"):
        await _collect(client, [{"role": "user", "content": "hi"}])


async def test_an_unreachable_server_is_a_model_error() -> None:
    client = llm.Client(llm.Settings("http://127.0.0.1:9/v1", "any", timeout_s=2))
    with pytest.raises(ModelError, match="cannot reach"):
        await _collect(client, [{"role": "user", "content": "hi"}])


def test_messages_fill_the_untranscribed_user_turn() -> None:
    history = [HistoryTurn("user", "Hi."), HistoryTurn("assistant", "Hello! How"), HistoryTurn("user", "")]
    chat = llm.messages(history, "What is two plus two?", "")
    assert chat == [
        {"role": "system", "content": llm.DEFAULT_INSTRUCTIONS},
        {"role": "user", "content": "Hi."},
        {"role": "assistant", "content": "Hello! How"},
        {"role": "user", "content": "What is two plus two?"},
    ]


def test_messages_append_the_user_turn_when_history_lacks_it() -> None:
    chat = llm.messages([HistoryTurn("assistant", "Hello.")], "Hi.", "Be terse.")
    assert chat[0] == {"role": "system", "content": "Be terse."}
    assert chat[-1] == {"role": "user", "content": "Hi."}


@pytest.mark.parametrize("style", ["vllm", "ollama"])
async def test_tool_calls_stream_back_whole_with_usage(chat_server: ChatServer, style: str) -> None:
    calls = (("call_a", "get_weather", '{"city": "Paris"}'), ("call_b", "get_weather", '{"city": "Oslo"}'))
    chat_server.replies = [Reply(("Let me check.",), calls, style=style, usage=(40, 12, 32))]
    client = llm.Client(llm.Settings(chat_server.url, "tiny"))
    events = await _events(
        client, [{"role": "user", "content": "Weather?"}], tools=[WEATHER], tool_choice="required"
    )
    assert events == [
        "Let me check.",
        llm.ToolCall("call_a", "get_weather", '{"city": "Paris"}'),
        llm.ToolCall("call_b", "get_weather", '{"city": "Oslo"}'),
        llm.Finish("tool_calls", Usage(40, 12, 32)),
    ]
    [request] = chat_server.requests
    assert request["tools"] == [WEATHER] and request["tool_choice"] == "required"
    assert request["stream_options"] == {"include_usage": True}


async def test_no_tools_means_no_tools_field_and_max_tokens_is_the_lower_limit(
    chat_server: ChatServer,
) -> None:
    chat_server.replies = [Reply(("a b c",), finish_reason="length")]
    client = llm.Client(llm.Settings(chat_server.url, "tiny", max_tokens=256))
    events = await _events(client, [{"role": "user", "content": "hi"}], max_tokens=3)
    assert isinstance(events[-1], llm.Finish) and events[-1].reason == "length"
    [request] = chat_server.requests
    assert "tools" not in request and request["max_tokens"] == 3


def test_calls_and_outputs_become_assistant_tool_calls_and_tool_messages() -> None:
    history = [
        HistoryTurn("user", "Weather in Paris and Oslo?"),
        HistoryTurn("assistant", "Let me check."),
        HistoryTurn("assistant", "{}", "function_call", "call_a", "get_weather"),
        HistoryTurn("assistant", "{}", "function_call", "call_b", "get_weather"),
        HistoryTurn("tool", "sunny", "function_call_output", "call_b"),
        HistoryTurn("tool", "rain", "function_call_output", "call_a"),
    ]
    chat = llm.messages(history, "Weather in Paris and Oslo?", "Be brief.")
    call = {"type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    assert chat[1:] == [
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [{"id": "call_a", **call}, {"id": "call_b", **call}],
        },
        {"role": "tool", "tool_call_id": "call_b", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_a", "content": "rain"},
    ]


def test_fit_drops_the_oldest_turns_first_never_the_instructions_and_logs_it(caplog: Any) -> None:
    chat: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for n in range(40):
        chat.append({"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n} " + "word " * 20})
    settings = llm.Settings("http://x", "m", max_tokens=100, context_tokens=600)
    with caplog.at_level("INFO", logger="livegen.models.cascade"):
        fitted = llm.fit(chat, [WEATHER], settings)
    assert fitted[0] == chat[0] and fitted[-1] == chat[-1] and 1 < len(fitted) < len(chat)
    assert fitted[1:] == chat[len(chat) - len(fitted) + 1 :]  # a suffix: the newest turns stay
    assert sum(llm.estimate_tokens(m) for m in fitted) + llm.estimate_tokens([WEATHER]) <= 500
    assert "dropped the" in caplog.text
    ratio = llm.fit(chat, [WEATHER], settings, 0.5)
    assert len(ratio) < len(fitted)
    assert llm.fit(chat, [WEATHER], settings, "disabled") == chat
    assert llm.fit(chat, [], llm.Settings("http://x", "m")) == chat


def test_fit_never_starts_with_a_tool_output() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    chat: list[dict[str, Any]] = [
        {"role": "system", "content": "s"},
        {"role": "assistant", "content": "x " * 400, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "out"},
        {"role": "user", "content": "next"},
    ]
    fitted = llm.fit(chat, [], llm.Settings("http://x", "m", max_tokens=10, context_tokens=100))
    assert [m["role"] for m in fitted] == ["system", "user"]
