"""The cascade's MCP client against a hostile MCP server on loopback (``mcp_hostile``): a
compressed answer, the process's bound on connections at once, a session's bound on listings at
once (``mcp_http``, ``mcp_session``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from livegen.bench.mcp_hostile import Hostile, serve_hostile
from livegen.models.cascade import mcp, mcp_http
from livegen.models.cascade.mcp_session import MAX_LISTINGS_AT_ONCE, McpTools
from livegen.models.voice import McpServer, OutputKind


@pytest.fixture(scope="module")
def hostile() -> Iterator[Hostile]:
    with serve_hostile() as host:
        yield host


def _server(url: str, timeout_s: float = 10.0, label: str = "h") -> McpServer:
    return McpServer(label, url, f"item_{label}", None, False, (), (), (), timeout_s)


def test_a_compressed_answer_is_refused_before_it_inflates(hostile: Hostile) -> None:
    with pytest.raises(mcp.McpFailure) as caught:
        asyncio.run(mcp.list_tools(_server(hostile.url("gzip"))))
    assert "compressed" in str(caught.value)


def test_past_the_processs_bound_on_connections_a_listing_fails_saying_so_and_then_succeeds(
    hostile: Hostile,
) -> None:
    async def scenario() -> tuple[str, int]:
        gate = mcp_http.gate()
        for _ in range(mcp_http.MAX_AT_ONCE):
            await gate.acquire()
        try:
            await mcp.list_tools(_server(hostile.url("ok"), timeout_s=0.3))
            refused = ""
        except mcp.McpFailure as failure:
            refused = str(failure)
        for _ in range(mcp_http.MAX_AT_ONCE):
            gate.release()
        return refused, len(await mcp.list_tools(_server(hostile.url("ok"))))

    refused, listed = asyncio.run(scenario())
    assert f"{mcp_http.MAX_AT_ONCE} MCP requests under way" in refused
    assert listed == 1


def test_a_session_lists_at_most_its_bound_of_servers_at_once(hostile: Hostile) -> None:
    reports: list[tuple[OutputKind, str]] = []

    async def scenario() -> None:
        tasks: list[asyncio.Task[Any]] = []

        def spawn(work: Any) -> asyncio.Task[Any]:
            tasks.append(asyncio.ensure_future(work))
            return tasks[-1]

        tools = McpTools(spawn, lambda kind, item_id, text: reports.append((kind, item_id)))
        tools.update([_server(hostile.url("hang"), timeout_s=3.0, label=f"h{i}") for i in range(8)])
        await asyncio.gather(*tasks)

    hostile.most_at_once = 0
    asyncio.run(scenario())
    assert len(reports) == 8 and {kind for kind, _ in reports} == {OutputKind.MCP_TOOLS_FAILED}
    assert 1 <= hostile.most_at_once <= MAX_LISTINGS_AT_ONCE
