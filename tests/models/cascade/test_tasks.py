"""Every task a cascade stream starts has an owner that ends it (``livegen/tasks.py``).

A language model that has said its first sentence and then holds its stream open: the response
is cancelled (a barge-in, ``response.cancel``) or its session closes mid-answer. Once the
response has ended, or the stream has closed, nothing it started still runs: not its producer,
not the reader of the endpoint's stream, not the synthesis of its pieces. Before, they were
cancelled and left to end on their own, after the response had ended (or to the collector).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from livegen.models.cascade import chat_stream
from livegen.models.voice import HistoryTurn, OutputKind, ResponseRequest, StreamConfig

from .support import ChatServer, Driver

pytestmark = pytest.mark.slow


def _stuck(handler: BaseHTTPRequestHandler, chat: ChatServer) -> None:
    """A first sentence at once, then nothing until the server stops: an answer still coming."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.end_headers()
    chunk = {"choices": [{"index": 0, "delta": {"content": "Hello there. And"}, "finish_reason": None}]}
    handler.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
    handler.wfile.flush()
    chat.stopping.wait(60)


async def _mid_answer(
    cascade: Any, chat_server: ChatServer, name: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, Driver]:
    """A stream whose response ``resp_1`` has said its first words, its endpoint still open."""
    chat_server.faults["<stuck>"] = _stuck
    # An endpoint known to answer without a bare </think>: its words stream as they come.
    monkeypatch.setitem(chat_stream.BARE_THINKERS, (chat_server.url, "tiny"), False)
    cascade.use_llm(chat_server.url, "tiny")
    try:
        stream = await cascade.open(name, StreamConfig(turn_detection=None))
    finally:
        cascade.use_llm(None, None)  # the model is shared: the stream keeps its own client
    driver = Driver(stream)
    history = [HistoryTurn("user", "Tell me <stuck> something.")]
    await stream.respond(1, ResponseRequest("resp_1", history=history))
    await driver.wait_for(OutputKind.TEXT_DELTA, response_id="resp_1")
    return stream, driver


def _running(before: set[asyncio.Task[Any]]) -> list[asyncio.Task[Any]]:
    return [task for task in asyncio.all_tasks() - before if not task.done()]


@pytest.mark.parametrize("ended_by", ["cancel", "close"])
async def test_a_response_ended_mid_answer_leaves_nothing_running(
    ended_by: str, cascade: Any, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = asyncio.all_tasks()
    stream, driver = await _mid_answer(cascade, chat_server, f"tasks-{ended_by}", monkeypatch)
    before.add(driver._pump)  # the test's reader of the outputs, until the stream closes
    response: asyncio.Task[None] = stream._responses["resp_1"][1]
    end: Callable[[], Any] = (lambda: stream.cancel(2)) if ended_by == "cancel" else stream.aclose
    await end()
    await asyncio.wait({response})
    assert response.cancelled()
    assert _running(before) == []  # the producer, the reader and the synthesis ended with it
    await driver.close()
    assert _running(before) == []
    assert not driver.of(OutputKind.RESPONSE_DONE)  # a cancelled response's end is the core's to say
