"""Remote MCP tools for the cascade: the stream is the MCP client of its session's servers.

A session's ``{"type": "mcp"}`` tools reach the stream as ``McpServer``s (``models/voice.py``).
For each, ``McpTools`` lists the server's tools (the official ``mcp`` package's client, over
streamable HTTP) as soon as the session names it, reports them (``MCP_TOOLS_LISTED`` or
``MCP_TOOLS_FAILED``), and offers those ``allowed_tools`` permits to the language model beside the
function tools, in the chat shape. When the model calls one, ``McpRun`` (one response's) asks the
client's approval first where the server requires it, calls the tool, reports the call and its
output or error, and gives the model what the tool said, so it answers in the same response.

Everything is bounded, since neither the server nor the client that named it is trusted: each
request to a server has a deadline (``--mcp-timeout``), a server's listing at most
``MAX_TOOLS`` tools of bounded size, a call's output at most ``MAX_OUTPUT_CHARS`` (an SSE event
at most ``MAX_EVENT_BYTES``), an approval at most ``APPROVAL_TIMEOUT_S``. Past one, that listing or
that call fails with a clear error, and the response goes on. All I/O is asynchronous on the
session's event loop (the ``mcp`` client is anyio on asyncio), so a slow server holds only its
own call. Headers (the client's secrets) go to the server and nowhere else: not into a log line,
an error or an event; errors name the server by its label and host.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from livegen.models.cascade import mcp_http
from livegen.models.voice import McpServer

mcp_http.quiet_mcp_logs()

logger = logging.getLogger("livegen.models.cascade")

#: Tools kept of one server's listing, and the size of each one's description and schema.
MAX_TOOLS = 128
MAX_DESCRIPTION_CHARS = 1024
MAX_SCHEMA_BYTES = 16 * 1024
#: The longest output of one call given to the model and the client.
MAX_OUTPUT_CHARS = 64 * 1024
#: The largest server-sent event the client reads (the mcp package's own cap).
MAX_EVENT_BYTES = 1024 * 1024
#: Seconds a call that needs approval waits for the client's answer.
APPROVAL_TIMEOUT_S = 120.0
#: Rounds of calls and answers one response may take before the model must answer in words.
MAX_ROUNDS = 4
_NAME = re.compile(r"[^A-Za-z0-9_-]")


class McpFailure(Exception):
    """A listing or a call failed; ``kind`` is the ``mcp_call`` error type it becomes."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class ListedTool:
    server: McpServer
    #: The tool's name on its server, and the name the language model is given (chat-safe).
    name: str
    chat_name: str
    description: str
    input_schema: Mapping[str, Any]

    def to_chat(self) -> dict[str, Any]:
        function = {"name": self.chat_name, "description": self.description, "parameters": self.input_schema}
        return {"type": "function", "function": function}


def _where(server: McpServer) -> str:
    """The server as errors and logs name it: its label and host, never its URL's path or query."""
    return f"MCP server {server.server_label!r} ({urlsplit(server.server_url).hostname})"


async def _session(server: McpServer, operation: Callable[[Any], Any]) -> Any:
    """Run ``operation(session)`` on a fresh connection to ``server``, within its deadline, its
    answers' byte caps and the process's bound on connections at once (``mcp_http``)."""
    budget, gate, connected = mcp_http.Budget(), mcp_http.gate(), False
    try:
        async with asyncio.timeout(server.timeout_s):
            async with gate:
                connected = True
                return await _bounded(_connect(server, operation, budget), budget)
    except TimeoutError:
        if not connected:
            raise McpFailure(
                "http_error", f"this server has {mcp_http.MAX_AT_ONCE} MCP requests under way; try later"
            ) from None
        raise McpFailure(
            "http_error", f"{_where(server)} did not answer within {server.timeout_s:g} s"
        ) from None
    except McpFailure:
        raise
    except Exception as exc:  # unreachable, refused, a broken stream, a protocol error
        if budget.exceeded:
            raise McpFailure("http_error", f"{_where(server)}: {budget.exceeded}") from None
        raise McpFailure("http_error", f"cannot use {_where(server)}: {_reason(exc)}") from None


async def _connect(server: McpServer, operation: Callable[[Any], Any], budget: mcp_http.Budget) -> Any:
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    headers = {**dict(server.headers), "Accept-Encoding": "identity"}
    transport = mcp_http.BoundedTransport(budget)
    timeout = httpx2.Timeout(server.timeout_s)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout, transport=transport) as http:
        stream = streamable_http_client(
            server.server_url, http_client=http, max_sse_event_size=MAX_EVENT_BYTES
        )
        async with stream as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await operation(session)


async def _bounded(work: Coroutine[Any, Any, Any], budget: mcp_http.Budget) -> Any:
    """``work``'s result, or its failure the moment one answer passes its cap: whatever the
    ``mcp`` package does with that answer's error (retry, reconnect), nothing more is read."""
    outcome: dict[str, Any] = {}

    async def run() -> None:
        try:
            outcome["value"] = await work
        except Exception as exc:  # raised below as itself, not inside the group's ExceptionGroup
            outcome["error"] = exc

    async with asyncio.TaskGroup() as tasks:
        task = tasks.create_task(run())
        tripped = tasks.create_task(budget.tripped.wait())
        await asyncio.wait({task, tripped}, return_when=asyncio.FIRST_COMPLETED)
        tripped.cancel()
        task.cancel()  # the group awaits it: a tripped answer's work is ended, never left running
    if budget.exceeded or ("value" not in outcome and "error" not in outcome):
        raise mcp_http.AnswerTooLarge(budget.exceeded)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _reason(exc: BaseException) -> str:
    """The innermost cause of a failure (anyio wraps them in groups), without any header."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"  # one line, whatever it said


async def list_tools(server: McpServer) -> list[ListedTool]:
    """The tools ``server`` lists that its ``allowed_tools`` permit, bounded."""

    async def operation(session: Any) -> Any:
        return await session.list_tools()

    result = await _session(server, operation)
    tools: list[ListedTool] = []
    for tool in result.tools:
        if not server.allows(tool.name) or len(tools) >= MAX_TOOLS:
            continue
        schema = tool.input_schema if isinstance(tool.input_schema, dict) else {"type": "object"}
        if len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
            logger.warning("%s: tool %r has too large a schema; not offered", _where(server), tool.name[:64])
            continue
        chat_name = _NAME.sub("_", tool.name)[:64] or "tool"
        description = (tool.description or "")[:MAX_DESCRIPTION_CHARS]
        tools.append(ListedTool(server, tool.name, chat_name, description, schema))
    return tools


async def call_tool(server: McpServer, name: str, arguments: dict[str, Any]) -> str:
    """What the tool answered, as text; a tool's own error is a ``tool_execution_error``."""

    async def operation(session: Any) -> Any:
        return await session.call_tool(name, arguments)

    result = await _session(server, operation)
    parts = []
    for part in result.content:
        text = getattr(part, "text", None)
        parts.append(text if isinstance(text, str) else json.dumps(part.model_dump(mode="json")))
        if sum(len(p) for p in parts) > MAX_OUTPUT_CHARS:
            raise McpFailure(
                "tool_execution_error", f"the tool's output passed {MAX_OUTPUT_CHARS} characters"
            )
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content))
    output = "\n".join(parts)
    if len(output) > MAX_OUTPUT_CHARS:
        raise McpFailure("tool_execution_error", f"the tool's output passed {MAX_OUTPUT_CHARS} characters")
    if result.is_error:
        raise McpFailure("tool_execution_error", output[:1000] or f"tool {name!r} failed")
    return output


def wire_tools(tools: list[ListedTool]) -> str:
    """The tools as the ``mcp_list_tools`` item holds them (JSON)."""
    return json.dumps(
        [
            {
                "name": t.name,
                "description": t.description,
                "input_schema": t.input_schema,
                "annotations": None,
            }
            for t in tools
        ]
    )


def approval_id() -> str:
    return f"mcpr_{uuid.uuid4().hex[:24]}"
