"""A hostile MCP server on loopback: answers that are too many, too large, endless or malformed.

A plain ASGI app (served by uvicorn in a thread) that speaks just enough of MCP's streamable HTTP
(``initialize``, ``notifications/*``, ``tools/list``, ``tools/call``) for the ``mcp`` package's
client to reach the attack; each attack is a path (``ATTACKS``), so one server holds them all:

- ``/tools-10k``: a ``tools/list`` of 10,000 small tools (about 2 MB);
- ``/listing-200mib``: a ``tools/list`` of 200 MiB, streamed;
- ``/listing-endless``: a ``tools/list`` that never ends;
- ``/call-100mib``: one tool whose ``tools/call`` answers 100 MiB;
- ``/sse-endless``: a ``tools/list`` answered as an SSE stream of notifications that never ends;
- ``/malformed``: a ``tools/list`` answer that is not a JSON-RPC message;
- ``/gzip``: a ``tools/list`` answer of 20 KiB that gzip inflates to 20 MiB;
- ``/hang``: a ``tools/list`` never answered (its connection held until the client leaves);
- ``/ok``: one tool, ``echo``, that answers, for a baseline.

``/v1/chat/completions`` is a scripted language model that calls ``flood``, so that a server
pointed at it (``--llm-base-url``) makes the 100 MiB call.

Big answers are generated as they are sent (the server holds none of them) and stop when the
client goes; ``sent`` counts each path's bytes written, so a test can assert the client read a
bounded part. The conformance tests, the fuzz bench and ``mcp_attacks`` use it.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

ATTACKS = (
    "tools-10k",
    "listing-200mib",
    "listing-endless",
    "call-100mib",
    "sse-endless",
    "malformed",
    "gzip",
    "hang",
)
MIB = 1024 * 1024
_CHUNK = 256 * 1024


@dataclass
class Hostile:
    base: str
    #: Bytes of answer bodies written, by path (without its slash).
    sent: Counter[str] = field(default_factory=Counter)
    #: JSON-RPC methods asked, by path.
    asked: dict[str, list[str]] = field(default_factory=dict)
    #: Answers being written now, and the most at once.
    open_now: int = 0
    most_at_once: int = 0

    def url(self, attack: str) -> str:
        return f"{self.base}/{attack}"


def _tool(name: str, description: str = "A tool among many.") -> bytes:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    return json.dumps({"name": name, "description": description, "inputSchema": schema}).encode()


def _answer(message_id: Any, result: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": message_id, "result": result}).encode()


async def _listing(message_id: Any, count: int | None, size: int | None) -> AsyncIterator[bytes]:
    """A tools/list answer of ``count`` small tools, or of ``size`` bytes of tools with long
    descriptions (few objects, many bytes), or endless (both None)."""
    yield b'{"jsonrpc": "2.0", "id": ' + json.dumps(message_id).encode() + b', "result": {"tools": ['
    description = "A tool among many." if count is not None else "x" * 60_000
    index, written = 0, 0
    while (count is None or index < count) and (size is None or written < size):
        chunk = b",".join(_tool(f"tool_{index + i}", description) for i in range(16))
        yield (b"," if index else b"") + chunk
        index, written = index + 16, written + len(chunk)
        await asyncio.sleep(0)
    yield b"]}}"


async def _call_result(message_id: Any, size: int) -> AsyncIterator[bytes]:
    head = b'{"jsonrpc": "2.0", "id": ' + json.dumps(message_id).encode()
    yield head + b', "result": {"content": [{"type": "text", "text": "'
    for _ in range(size // _CHUNK):
        yield b"x" * _CHUNK
        await asyncio.sleep(0)
    yield b'"}], "isError": false}}'


async def _sse_forever() -> AsyncIterator[bytes]:
    note = {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"level": "info", "data": "x" * 900},
    }
    event = b"event: message\ndata: " + json.dumps(note).encode() + b"\n\n"
    while True:
        yield event * 64
        await asyncio.sleep(0)


def _bomb(message_id: Any) -> bytes:
    tool = {"name": "bomb", "description": "x" * (20 * MIB), "inputSchema": {"type": "object"}}
    return gzip.compress(_answer(message_id, {"tools": [tool]}), compresslevel=9)


def _attack_body(attack: str, method: str, message_id: Any) -> tuple[str, AsyncIterator[bytes] | bytes]:
    """(content type, body) of ``attack``'s answer to ``method``."""
    json_type = "application/json"
    if method == "tools/list":
        if attack == "tools-10k":
            return json_type, _listing(message_id, 10_000, None)
        if attack == "listing-200mib":
            return json_type, _listing(message_id, None, 200 * MIB)
        if attack == "listing-endless":
            return json_type, _listing(message_id, None, None)
        if attack == "sse-endless":
            return "text/event-stream", _sse_forever()
        if attack == "gzip":
            return json_type, _bomb(message_id)
        if attack == "hang":
            return json_type, b""  # never sent: the answer waits for the client to leave
        if attack == "malformed":
            return json_type, b'{"jsonrpc": "2.0", "id": ' + json.dumps(
                message_id
            ).encode() + b', "result": 7}'
        name = "flood" if attack == "call-100mib" else "echo"
        return json_type, _answer(message_id, {"tools": [json.loads(_tool(name))]})
    if method == "tools/call" and attack == "call-100mib":
        return json_type, _call_result(message_id, 100 * MIB)
    if method == "tools/call":
        return json_type, _answer(
            message_id, {"content": [{"type": "text", "text": "echoed"}], "isError": False}
        )
    error = {"jsonrpc": "2.0", "id": message_id, "error": {"code": -32601, "message": "Method not found"}}
    return json_type, json.dumps(error).encode()


class _App:
    def __init__(self, host: Hostile) -> None:
        self.host = host

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        attack = scope["path"].strip("/")
        if attack == "v1/chat/completions":
            await self._chat(receive, send)
            return
        if scope["method"] != "POST":
            await self._plain(send, 405, b"")
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = json.loads(body or b"{}")
        method, message_id = request.get("method", ""), request.get("id")
        self.host.asked.setdefault(attack, []).append(method)
        if message_id is None:
            await self._plain(send, 202, b"")
        elif method == "initialize":
            version = request.get("params", {}).get("protocolVersion", "2025-06-18")
            info = {
                "protocolVersion": version,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1"},
            }
            await self._plain(send, 200, _answer(message_id, info), "application/json")
        else:
            content_type, answer = _attack_body(attack, method, message_id)
            await self._stream(attack, send, receive, content_type, answer)

    async def _chat(self, receive: Any, send: Any) -> None:
        """A scripted language model (OpenAI's chat streaming): it calls ``flood`` when the user
        spoke last, and answers in words once a tool has."""
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        last = (json.loads(body).get("messages") or [{}])[-1]
        if last.get("role") == "user":
            function = {"name": "flood", "arguments": "{}"}
            call = {"index": 0, "id": "c1", "type": "function", "function": function}
            delta: dict[str, Any] = {"tool_calls": [call]}
            finish = "tool_calls"
        else:
            delta, finish = {"content": "The tool failed."}, "stop"
        chunks = [{"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}]
        chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        stream = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
        await self._plain(send, 200, stream, "text/event-stream")

    async def _plain(self, send: Any, status: int, body: bytes, content_type: str = "text/plain") -> None:
        headers = [(b"content-type", content_type.encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _stream(self, attack: str, send: Any, receive: Any, content_type: str, answer: Any) -> None:
        self.host.open_now += 1
        self.host.most_at_once = max(self.host.most_at_once, self.host.open_now)
        gone = asyncio.ensure_future(receive())  # http.disconnect once the client leaves
        try:
            if attack == "hang":
                await gone
                return
            await self._write(attack, send, gone, content_type, answer)
        except OSError:
            return
        finally:
            self.host.open_now -= 1
            gone.cancel()

    async def _write(self, attack: str, send: Any, gone: Any, content_type: str, answer: Any) -> None:
        headers = [(b"content-type", content_type.encode())]
        if attack == "gzip":
            headers.append((b"content-encoding", b"gzip"))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if isinstance(answer, bytes):
            self.host.sent[attack] += len(answer)
            await send({"type": "http.response.body", "body": answer})
            return
        async for chunk in answer:
            if gone.done():
                return
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            self.host.sent[attack] += len(chunk)
        await send({"type": "http.response.body", "body": b""})


@contextmanager
def serve_hostile() -> Iterator[Hostile]:
    """The hostile server on a free loopback port, for as long as the block runs."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    host = Hostile(base=f"http://127.0.0.1:{sock.getsockname()[1]}")
    config = uvicorn.Config(_App(host), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield host
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
