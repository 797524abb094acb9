"""Hostile MCP servers through the official ``openai`` SDK: livegen reads a bounded part of each
answer, fails that listing or call with its typed error, and goes on serving.

The servers are ``livegen.bench.mcp_hostile`` (a plain ASGI app on loopback): a listing of 10,000
tools, one of 200 MiB, one that never ends, an endless SSE stream, a malformed answer, a call that
answers 100 MiB. Each test asserts what the session is told, how many bytes the hostile server
managed to send (bounded: livegen stopped reading at its cap), and that ``/health`` and a second
session still answer afterwards. No timing is asserted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from conformance.test_openai_mcp import Recorder, _ask, _items, _mark, _open, _sdk, _tool, serving_mcp
from livegen.bench.mcp_hostile import MIB, Hostile, serve_hostile
from livegen.models import Registry
from livegen.models.cascade.mcp_http import MAX_CALL_BYTES, MAX_LIST_BYTES
from livegen.models.cascade.mcp_session import MAX_CALLS
from livegen.server.thread import ServerThread
from models.cascade.support import ChatServer, Reply

#: What a capped answer may have cost the hostile server's sends: the cap, and the socket buffers.
SENT_BOUND = 32 * MIB


@pytest.fixture
def hostile() -> Iterator[Hostile]:
    with serve_hostile() as host:
        yield host


@pytest.fixture
def server(voice_registry: Registry, chat: ChatServer) -> Iterator[ServerThread]:
    """A server whose MCP deadline is long, so that only a cap can end a hostile answer early."""
    with serving_mcp(voice_registry, chat, timeout_s=20.0) as server:
        yield server


async def _still_serving(server: ServerThread, hostile: Hostile) -> None:
    """``/health`` answers, and a new session lists a well-behaved server."""
    async with httpx.AsyncClient() as client:
        assert (await client.get(f"{server.http_url}/health")).status_code == 200
    async with _sdk(server).realtime.connect(model="gpt-realtime-2") as connection:
        recorder = await _open(connection, [_tool(hostile.url("ok"), server_label="ok")])
        await recorder.wait_for("mcp_list_tools.completed")
        await recorder.close()


def _failures(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "MCP" in r.getMessage() and "failed" in r.getMessage()]


#: The caps each attack may trip first. An endless SSE stream of small notifications passes the
#: object cap or the byte cap first depending on how its chunks arrive; either ends it at once.
ATTACKS = {
    "tools-10k": ("JSON objects",),
    "listing-200mib": (f"passed {MAX_LIST_BYTES} bytes",),
    "listing-endless": (f"passed {MAX_LIST_BYTES} bytes",),
    "sse-endless": (f"passed {MAX_LIST_BYTES} bytes", "JSON objects"),
}


async def _count(recorder: Recorder, kind: str, count: int, within: float = 60.0) -> list[Any]:
    """The first ``count`` events of ``kind``, once that many have come."""
    deadline = time.monotonic() + within
    while len(recorder.of(kind)) < count and time.monotonic() < deadline:
        await recorder.wait_for(kind, within=within)
        await asyncio.sleep(0.02)
    assert len(recorder.of(kind)) >= count, [e.type for e in recorder.events]
    return recorder.of(kind)[:count]


@_mark("mcp-tools")
async def test_hostile_listings_in_one_session_update_each_fail_at_their_cap_and_the_server_goes_on(
    server: ServerThread, hostile: Hostile, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    tools = [_tool(hostile.url(attack), server_label=attack.replace("-", "_")) for attack in ATTACKS]
    async with _sdk(server).realtime.connect(model="gpt-realtime-2") as connection:
        recorder = await _open(connection, tools)
        failed = await _count(recorder, "mcp_list_tools.failed", len(ATTACKS))
        await recorder.close()
    listed = {e.item.id for e in recorder.of("conversation.item.added") if e.item.type == "mcp_list_tools"}
    assert {e.item_id for e in failed} == listed and len(listed) == len(ATTACKS)
    assert not recorder.of("mcp_list_tools.completed")
    lines = _failures(caplog)
    for attack, reasons in ATTACKS.items():
        label = attack.replace("-", "_")
        assert any(label in line and any(r in line for r in reasons) for line in lines), (attack, lines)
        assert hostile.sent[attack] < SENT_BOUND, (attack, hostile.sent[attack])
    await _still_serving(server, hostile)


@_mark("mcp-tools")
async def test_a_100_mib_call_result_fails_that_call_at_its_cap_and_the_response_goes_on(
    server: ServerThread,
    chat: ChatServer,
    hostile: Hostile,
) -> None:
    chat.replies = [Reply(calls=(("c1", "flood", "{}"),)), Reply(("The tool failed.",))]
    tool = _tool(hostile.url("call-100mib"), require_approval="never")
    async with _sdk(server).realtime.connect(model="gpt-realtime-2") as connection:
        recorder = await _open(connection, [tool])
        await recorder.wait_for("mcp_list_tools.completed")
        await _ask(connection, "Flood me.")
        done = await recorder.wait_for("response.done")
        await recorder.close()
    (call,) = _items(recorder, "mcp_call")
    assert call.output is None and call.error is not None
    assert f"its tools/call answer passed {MAX_CALL_BYTES} bytes" in call.error.message
    assert done.response.status == "completed"
    assert hostile.sent["call-100mib"] < SENT_BOUND
    await _still_serving(server, hostile)


@_mark("mcp-tools")
async def test_a_malformed_mcp_answer_is_one_warning_line_without_the_mcp_packages_traceback(
    server: ServerThread, hostile: Hostile, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with _sdk(server).realtime.connect(model="gpt-realtime-2") as connection:
        recorder = await _open(connection, [_tool(hostile.url("malformed"), server_label="bad")])
        await recorder.wait_for("mcp_list_tools.failed")
        await recorder.close()
    assert not [r for r in caplog.records if r.exc_info or r.exc_text], "a traceback was logged"
    assert not [r for r in caplog.records if r.name.startswith("mcp") and r.levelno > logging.INFO]
    (line,) = [r for r in caplog.records if "listing MCP tools failed" in r.getMessage()]
    assert line.levelno == logging.WARNING and "\n" not in line.getMessage()


@_mark("mcp-tools")
async def test_one_response_makes_at_most_max_calls_mcp_calls(
    server: ServerThread,
    chat: ChatServer,
    hostile: Hostile,
) -> None:
    many = tuple((f"c{i}", "echo", "{}") for i in range(3 * MAX_CALLS))
    chat.replies = [Reply(calls=many[: 2 * MAX_CALLS]), Reply(calls=many[2 * MAX_CALLS :]), Reply(("Done.",))]
    tool = _tool(hostile.url("ok"), require_approval="never")
    async with _sdk(server).realtime.connect(model="gpt-realtime-2") as connection:
        recorder = await _open(connection, [tool])
        await recorder.wait_for("mcp_list_tools.completed")
        await _ask(connection, "Echo a lot.")
        done = await recorder.wait_for("response.done")
        await recorder.close()
    assert len(_items(recorder, "mcp_call")) == MAX_CALLS
    assert hostile.asked["ok"].count("tools/call") == MAX_CALLS
    told = [m["content"] for m in chat.requests[-1]["messages"] if m["role"] == "tool"]
    assert len(told) == 3 * MAX_CALLS and sum(t.startswith("Not called") for t in told) == 2 * MAX_CALLS
    assert done.response.status == "completed"


@_mark("mcp-tools")
@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:99999/mcp", "http://[::1/mcp", "http://u:pw@127.0.0.1/mcp"]
)
async def test_a_bad_server_url_is_invalid_value_naming_it_and_the_session_goes_on(
    server: ServerThread, url: str
) -> None:
    async with _sdk(server).realtime.connect(model="gpt-realtime-2") as connection:
        recorder = Recorder(connection)
        bad = {"type": "realtime", "tools": [_tool(url)]}
        await connection.session.update(session=bad)  # type: ignore[arg-type]
        error = await recorder.wait_for("error")
        await connection.session.update(session={"type": "realtime", "instructions": "Be brief."})
        updated = await recorder.wait_for("session.updated")
        await recorder.close()
    assert (error.error.code, error.error.param) == ("invalid_value", "session.tools[0].server_url")
    assert updated.session.tools == [] and b"pw@" not in b"".join(recorder.raw)
