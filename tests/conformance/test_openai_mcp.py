"""Remote MCP tools through the official ``openai`` SDK: livegen is the MCP client.

A real MCP server on loopback (``mcp_server.py``, the ``mcp`` package's ``MCPServer`` over
streamable HTTP) holds tools that answer, fail, hang, answer too much and need approval; the
language model is ``ChatServer``, the scripted chat endpoint the tool tests use, which calls
them. Every event livegen sends is parsed with the SDK's own typed union
(``RealtimeServerEvent``, validated, not constructed), so an unknown type or a missing field
fails the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from openai import AsyncOpenAI
from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter

from conformance.conftest import API_KEY, _serve
from conformance.mcp_server import McpHost, serve_mcp
from conformance.test_openai_sdk import GA
from livegen.models import Registry
from livegen.server.thread import ServerThread
from models.cascade.support import ChatServer, Reply

EVENTS: TypeAdapter[Any] = TypeAdapter(RealtimeServerEvent)
#: The client's secrets for the MCP server: they must reach it and nothing else.
API_KEY_HEADER = "hdr-secret-7c1f"
TOKEN = "tok-secret-93ab"


def _mark(capability: str) -> pytest.MarkDecorator:
    return pytest.mark.conformance(client=GA.client, capability=capability)


@pytest.fixture
def mcp_host() -> Iterator[McpHost]:
    with serve_mcp() as host:
        yield host


@contextlib.contextmanager
def serving_mcp(voice_registry: Registry, chat: ChatServer, timeout_s: float) -> Iterator[ServerThread]:
    """A server that reaches MCP servers on loopback, its language model the scripted ``chat``."""
    server = _serve(
        voice_registry,
        llm_base_url=chat.url,
        llm_model="tiny",
        mcp_allowed_hosts=("127.0.0.1",),
        mcp_timeout_s=timeout_s,
    )
    try:
        server.wait_ready(timeout=300)
        yield server
    finally:
        server.stop()
        voice_registry.load("cascade").use_llm(None, None)


@pytest.fixture
def mcp_server(voice_registry: Registry, chat: ChatServer) -> Iterator[ServerThread]:
    with serving_mcp(voice_registry, chat, timeout_s=1.0) as server:
        yield server


class Recorder:
    """Every server event, raw and parsed strictly by the SDK's union, as it arrives."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.raw: list[bytes] = []
        self.events: list[Any] = []
        self._task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        while True:
            data = await self.connection.recv_bytes()
            self.raw.append(data)
            self.events.append(EVENTS.validate_json(data))  # raises on an unknown type or field

    async def wait_for(self, kind: str, within: float = 30.0, **match: Any) -> Any:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self._task.done():
                self._task.result()  # a parse failure surfaces here
            for event in self.events:
                if event.type == kind and all(_get(event, k) == v for k, v in match.items()):
                    return event
            await asyncio.sleep(0.01)
        raise AssertionError(f"no {kind} {match} within {within} s; got {[e.type for e in self.events]}")

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task
        if self._task.done() and not self._task.cancelled() and self._task.exception() is not None:
            raise self._task.exception()  # type: ignore[misc]


def _get(event: Any, dotted: str) -> Any:
    value = event
    for name in dotted.split("__"):
        value = getattr(value, name, None)
    return value


def _tool(url: str, **fields: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "meteo", "server_url": url, **fields}


def _sdk(server: ServerThread) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key=API_KEY, base_url=f"{server.http_url}/v1", websocket_base_url=f"{server.ws_url}/v1"
    )


async def _open(connection: Any, tools: list[dict[str, Any]]) -> Recorder:
    recorder = Recorder(connection)
    session = {"type": "realtime", "audio": {"input": {"turn_detection": None}}, "tools": tools}
    await connection.session.update(session=session)
    await recorder.wait_for("session.updated")
    return recorder


async def _ask(connection: Any, text: str) -> None:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    await connection.conversation.item.create(item=item)
    await connection.response.create()


def _said(recorder: Recorder) -> str:
    return "".join(e.delta for e in recorder.of(GA.transcript_delta))


def _items(recorder: Recorder, kind: str) -> list[Any]:
    return [e.item for e in recorder.of("conversation.item.done") if e.item.type == kind]


@_mark("mcp-tools")
async def test_an_mcp_tool_is_listed_called_by_the_server_and_answered_in_the_same_response(
    mcp_server: ServerThread, chat: ChatServer, mcp_host: McpHost
) -> None:
    chat.replies = [
        Reply(calls=(("call_1", "weather", '{"city": "Paris"}'),)),
        Reply(("It is sunny in Paris.",)),
    ]
    tool = _tool(
        mcp_host.url, require_approval="never", headers={"X-Api-Key": API_KEY_HEADER}, authorization=TOKEN
    )
    async with _sdk(mcp_server).realtime.connect(model="gpt-realtime-2") as connection:
        recorder = await _open(connection, [tool])
        listed = await recorder.wait_for("mcp_list_tools.completed")
        await _ask(connection, "What is the weather in Paris?")
        done = await recorder.wait_for("response.done")
        await recorder.close()
    (tools,) = _items(recorder, "mcp_list_tools")
    assert tools.id == listed.item_id and tools.server_label == "meteo"
    assert {"weather", "broken", "hang", "delete_file"} <= {t.name for t in tools.tools}
    (call,) = _items(recorder, "mcp_call")
    assert (call.name, json.loads(call.arguments), call.error) == ("weather", {"city": "Paris"}, None)
    assert call.output == "Sunny and 21 degrees in Paris."
    assert [e.item_id for e in recorder.of("response.mcp_call.completed")] == [call.id]
    assert "".join(e.delta for e in recorder.of("response.mcp_call_arguments.delta")) == call.arguments
    assert done.response.status == "completed" and _said(recorder) == "It is sunny in Paris."
    assert [o.type for o in done.response.output] == ["mcp_call", "message"]
    # The model was offered the tool beside the function tools, and given its output in the same response.
    assert "weather" in {t["function"]["name"] for t in chat.requests[0]["tools"]}
    answered = chat.requests[1]["messages"][-1]
    assert answered["role"] == "tool" and answered["content"] == "Sunny and 21 degrees in Paris."
    # The secrets reached the MCP server, and never the client.
    assert any(h.get("x-api-key") == API_KEY_HEADER for h in mcp_host.headers)
    assert any(h.get("authorization") == f"Bearer {TOKEN}" for h in mcp_host.headers)
    wire = b"".join(recorder.raw)
    assert API_KEY_HEADER.encode() not in wire and TOKEN.encode() not in wire


@_mark("mcp-tools")
async def test_failing_hanging_flooding_and_unreachable_mcp_servers_fail_their_calls_and_the_response_goes_on(
    mcp_server: ServerThread, chat: ChatServer, mcp_host: McpHost
) -> None:
    chat.replies = [
        Reply(calls=(("c1", "broken", "{}"), ("c2", "hang", "{}"), ("c3", "flood", "{}"))),
        Reply(("Sorry, the weather tools are not working.",)),
    ]
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    dead = _tool(f"http://127.0.0.1:{closed.getsockname()[1]}/mcp", server_label="dead")
    async with _sdk(mcp_server).realtime.connect(model="gpt-realtime-2") as connection:
        recorder = await _open(connection, [_tool(mcp_host.url, require_approval="never"), dead])
        await recorder.wait_for("mcp_list_tools.completed")
        failed_list = await recorder.wait_for("mcp_list_tools.failed")
        await _ask(connection, "How is the weather?")
        done = await recorder.wait_for("response.done")
        await recorder.close()
    closed.close()
    assert failed_list.item_id == next(
        i.id for i in _items(recorder, "mcp_list_tools") if i.server_label == "dead"
    )
    calls = {c.name: c for c in _items(recorder, "mcp_call")}
    assert set(calls) == {"broken", "hang", "flood"}
    assert all(c.output is None and c.error is not None for c in calls.values())
    assert "did not answer within 1 s" in calls["hang"].error.message
    assert "output passed" in calls["flood"].error.message
    assert len(recorder.of("response.mcp_call.failed")) == 3
    assert done.response.status == "completed"
    assert _said(recorder) == "Sorry, the weather tools are not working."
    told = [m["content"] for m in chat.requests[1]["messages"] if m["role"] == "tool"]
    assert len(told) == 3 and all(t.startswith("The tool failed") for t in told)


@_mark("mcp-tools")
async def test_a_tool_that_needs_approval_waits_for_the_clients_answer(
    mcp_server: ServerThread, chat: ChatServer, mcp_host: McpHost
) -> None:
    chat.replies = [
        Reply(calls=(("c1", "delete_file", '{"path": "/tmp/old"}'),)),
        Reply(("Done, the file is gone.",)),
    ]
    approval = {"always": {"tool_names": ["delete_file"]}, "never": {"tool_names": ["weather"]}}
    async with _sdk(mcp_server).realtime.connect(model="gpt-realtime-2") as connection:
        recorder = await _open(connection, [_tool(mcp_host.url, require_approval=approval)])
        await recorder.wait_for("mcp_list_tools.completed")
        await _ask(connection, "Delete my old file.")
        request = await recorder.wait_for("response.output_item.done", item__type="mcp_approval_request")
        await asyncio.sleep(0.3)
        assert mcp_host.calls == [] and not recorder.of("response.done")  # nothing called before the answer
        answer = {"type": "mcp_approval_response", "approval_request_id": request.item.id, "approve": True}
        await connection.conversation.item.create(item=answer)  # type: ignore[arg-type]
        done = await recorder.wait_for("response.done")
        await recorder.close()
    assert (request.item.name, request.item.server_label) == ("delete_file", "meteo")
    assert mcp_host.calls == [("delete_file", {"path": "/tmp/old"})]
    (call,) = _items(recorder, "mcp_call")
    assert call.approval_request_id == request.item.id and call.output == "deleted /tmp/old"
    assert done.response.status == "completed" and _said(recorder) == "Done, the file is gone."


@_mark("mcp-tools")
async def test_an_mcp_server_on_a_host_the_operator_did_not_allow_is_refused_by_name(
    plain_server: ServerThread, mcp_host: McpHost
) -> None:
    async with _sdk(plain_server).realtime.connect(model="gpt-realtime-2") as connection:
        recorder = Recorder(connection)
        tool = _tool(mcp_host.url)
        await connection.session.update(session={"type": "realtime", "tools": [tool]})  # type: ignore[list-item]
        error = await recorder.wait_for("error")
        await connection.session.update(session={"type": "realtime", "instructions": "Be brief."})
        updated = await recorder.wait_for("session.updated")
        await recorder.close()
    assert error.error.code == "invalid_value" and error.error.param == "session.tools"
    assert "--mcp-allowed-hosts" in error.error.message
    assert updated.session.tools == [] and mcp_host.headers == []  # nothing reached the MCP server


@_mark("mcp-tools")
async def test_a_webrtc_call_uses_mcp_tools_as_the_websocket_does(
    mcp_server: ServerThread, chat: ChatServer, mcp_host: McpHost
) -> None:
    from livegen.client.webrtc import Caller, mint

    chat.replies = [Reply(calls=(("call_w", "weather", '{"city": "Oslo"}'),)), Reply(("Oslo is sunny.",))]
    session = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}
    caller = Caller(mcp_server.http_url, mint(mcp_server.http_url, API_KEY, session=session)["value"])
    try:
        await caller.connect()
        await caller.event("session.updated")
        tool = _tool(mcp_host.url, require_approval="never")
        caller.send({"type": "session.update", "session": {"type": "realtime", "tools": [tool]}})
        await caller.event("mcp_list_tools.completed")
        text = [{"type": "input_text", "text": "Weather in Oslo?"}]
        caller.send(
            {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": text}}
        )
        caller.send({"type": "response.create"})
        done = await caller.event("response.done")
    finally:
        await caller.close()
    for event in caller.events:  # the data channel carries the same events, each one the SDK's
        EVENTS.validate_python(event)
    call = next(o for o in done["response"]["output"] if o["type"] == "mcp_call")
    assert call["output"] == "Sunny and 21 degrees in Oslo." and done["response"]["status"] == "completed"
