"""The language-model client against a real local HTTP server speaking OpenAI's streaming format."""

from __future__ import annotations

import pytest

from livegen.errors import ModelError
from livegen.models.cascade import llm
from livegen.models.voice import HistoryTurn
from models.cascade_support import ChatServer


async def _collect(client: llm.Client, chat: list[dict[str, str]]) -> list[str]:
    try:
        return [delta async for delta in client.stream(chat)]
    finally:
        await client.aclose()


async def test_streams_the_deltas_in_order(chat_server: ChatServer) -> None:
    chat_server.reply = ["Paris", " is the", " capital."]
    client = llm.Client(llm.Settings(chat_server.url, "tiny", api_key="sk-test"))
    deltas = await _collect(client, [{"role": "user", "content": "Capital of France?"}])
    assert deltas == ["Paris", " is the", " capital."]
    [request] = chat_server.requests
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
