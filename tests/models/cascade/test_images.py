"""``input_image`` over the wire: an image reaches a vision model, a bad one is refused, no model says so.

The server is ``livegen serve --llm-base-url`` against ``ChatServer`` (a scripted
OpenAI-compatible endpoint on loopback), or ``livegen serve`` with no language
model; the client is the official SDK, sending a user message of text and a
PNG as gpt-realtime-2 takes it (a base64 ``data:`` URI).
"""

from __future__ import annotations

import base64
import zlib
from typing import Any

import pytest

from livegen.server.thread import ServerThread
from livegen.voice.conversation import MAX_HISTORY_CHARS
from models.cascade.support import ChatServer, RealtimeCall, Reply
from models.cascade.test_tools import agent, llm_server, said, sdk

pytestmark = pytest.mark.slow
__all__ = ["llm_server"]  # the fixture, shared with the tool tests


def png(width: int = 2, height: int = 2) -> bytes:
    """A real PNG (black pixels) of that size."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    rows = b"".join(b"\0" + b"\0" * 3 * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def data_uri(image: bytes, kind: str = "image/png") -> str:
    return f"data:{kind};base64,{base64.b64encode(image).decode()}"


async def show(connection: Any, text: str, uri: str) -> None:
    content = [
        {"type": "input_text", "text": text},
        {"type": "input_image", "image_url": uri, "detail": "low"},
    ]
    await connection.conversation.item.create(item={"type": "message", "role": "user", "content": content})


async def test_an_image_reaches_the_chat_server_and_bad_ones_are_refused(
    llm_server: ServerThread, chat_server: ChatServer
) -> None:
    chat_server.replies = [Reply(("A black square.",))]
    uri = data_uri(png())
    async with sdk(llm_server).realtime.connect(model="gpt-realtime-2") as connection:
        call = RealtimeCall(connection)
        await agent(connection, call)
        mark = len(call.events)
        await connection.conversation.item.create(
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_image", "image_url": "data:image/gif;base64,R0lGODlh"}],
            }
        )
        wrong_type = await call.wait_for("error", after=mark)
        mark = len(call.events)
        huge = data_uri(b"\x89PNG\r\n\x1a\n" + bytes(MAX_HISTORY_CHARS))
        await show(connection, "And this?", huge)
        too_large = await call.wait_for("error", after=mark)
        await show(connection, "What is in this picture?", uri)
        added = await call.wait_for("conversation.item.added")
        await connection.response.create()
        done = await call.wait_for("response.done")
        await call.close()
    assert (wrong_type.error.code, wrong_type.error.param) == (
        "invalid_image_format",
        "item.content[0].image_url",
    )
    assert "['png', 'jpeg']" in wrong_type.error.message
    assert (too_large.error.code, too_large.error.param) == ("invalid_value", "item.content[1].image_url")
    assert str(MAX_HISTORY_CHARS) in too_large.error.message
    assert [part.type for part in added.item.content] == ["input_text", "input_image"]
    assert added.item.content[1].image_url == uri
    assert done.response.status == "completed"
    assert said(call, done.response.id) == "A black square."
    [request] = chat_server.requests
    user = request["messages"][-1]
    assert user == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": uri, "detail": "low"}},
        ],
    }


async def test_without_a_language_model_the_responder_says_it_cannot_see_images(
    default_server: ServerThread,
) -> None:
    async with sdk(default_server).realtime.connect(model="gpt-realtime-2") as connection:
        call = RealtimeCall(connection)
        await agent(connection, call)
        await show(connection, "What time is it?", data_uri(png()))
        await connection.response.create()
        done = await call.wait_for("response.done")
        await call.close()
    assert done.response.status == "completed"
    answer = said(call, done.response.id)
    assert "can't see images" in answer and "--llm-base-url" in answer  # not the time it was asked
