"""One stream's MCP servers (``McpTools``) and one response's calls of their tools (``McpRun``).

``McpTools`` lists each server the session names once (a task per server, started when the
configuration names it, so the list is usually ready before the first response) and hands a
response the tools listed so far, waiting for listings still under way (each within its
deadline). ``McpRun`` is bound to one response: its calls are reported with that response's id
and epoch, and the approvals it waits for are answered through ``Stream.approve``. A cancelled
response cancels its call (the task is the response's), and its pending approvals with it.

Both are bounded: a session lists at most ``MAX_LISTINGS_AT_ONCE`` servers at once, and a
response makes at most ``MAX_CALLS`` calls, however many rounds and calls its model asks for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from livegen.models.cascade import mcp
from livegen.models.cascade.chat_stream import ToolCall
from livegen.models.voice import McpServer, OutputKind

logger = logging.getLogger("livegen.models.cascade")

#: ``report(kind, item_id, text)``: a listing's outcome, for the session.
Report = Callable[[OutputKind, str, str], None]
Spawn = Callable[[Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]
#: Listings of one session under way at once (the rest wait their turn): with the process's
#: bound (``mcp_http.MAX_AT_ONCE``), one session naming many servers cannot hold every connection.
MAX_LISTINGS_AT_ONCE = 4
#: MCP calls one response may make, over all its rounds; the model is told of any past them.
MAX_CALLS = 8


class McpTools:
    def __init__(self, spawn: Spawn, report: Report) -> None:
        self._spawn = spawn
        self._report = report
        #: The servers' listings by their ``mcp_list_tools`` item id, in the session's order.
        self._listings: dict[str, asyncio.Task[list[mcp.ListedTool]]] = {}
        self._gate = asyncio.Semaphore(MAX_LISTINGS_AT_ONCE)

    @property
    def is_empty(self) -> bool:
        return not self._listings

    def update(self, servers: Sequence[McpServer]) -> None:
        """List each server new to the session; forget those it no longer names."""
        wanted = {server.list_item_id: server for server in servers}
        for item_id in [i for i in self._listings if i not in wanted]:
            self._listings.pop(item_id).cancel()
        for item_id, server in wanted.items():
            if item_id not in self._listings:
                self._listings[item_id] = self._spawn(self._list(item_id, server))

    async def _list(self, item_id: str, server: McpServer) -> list[mcp.ListedTool]:
        try:
            async with self._gate:
                tools = await mcp.list_tools(server)
        except mcp.McpFailure as failure:
            logger.warning("listing MCP tools failed: %s", failure)
            self._report(OutputKind.MCP_TOOLS_FAILED, item_id, str(failure))
            return []
        self._report(OutputKind.MCP_TOOLS_LISTED, item_id, mcp.wire_tools(tools))
        return tools

    async def tools(self, taken: frozenset[str]) -> dict[str, mcp.ListedTool]:
        """Every listed tool by the name the model is given; a name ``taken`` (a function tool's,
        or an earlier server's) is not offered twice."""
        offered: dict[str, mcp.ListedTool] = {}
        for task in list(self._listings.values()):
            with contextlib.suppress(asyncio.CancelledError):
                for tool in await asyncio.shield(task):
                    if tool.chat_name not in taken and tool.chat_name not in offered:
                        offered[tool.chat_name] = tool
        return offered


#: ``emit(kind, **fields)``: an output of the response the run is bound to.
Emit = Callable[..., None]


@dataclass
class McpRun:
    """The MCP calls of one response."""

    tools: dict[str, mcp.ListedTool]
    emit: Emit
    #: Approval requests waiting for the client, by id (the stream's, shared by its responses).
    approvals: dict[str, asyncio.Future[bool]] = field(default_factory=dict)
    #: Calls asked for so far (``MAX_CALLS`` at most are made).
    asked: int = 0

    def chat_tools(self) -> list[dict[str, Any]]:
        return [tool.to_chat() for tool in self.tools.values()]

    def owns(self, name: str) -> bool:
        return name in self.tools

    async def run(self, call: ToolCall) -> str:
        """Make the call (after the client's approval, where needed); what the model is told."""
        tool = self.tools[call.name]
        self.asked += 1
        if self.asked > MAX_CALLS:
            logger.info("MCP call of %r not made: the response made its %d calls", tool.name[:64], MAX_CALLS)
            return f"Not called: this answer made {MAX_CALLS} tool calls, the most it may. Answer now."
        label = tool.server.server_label
        approval = ""
        if tool.server.needs_approval(tool.name):
            approval = mcp.approval_id()
            if not await self._approved(approval, tool, call.arguments):
                return f"The user did not approve calling {tool.name!r}; do not call it again in this answer."
        call_id = call.call_id or f"mcp_{uuid.uuid4().hex[:24]}"
        fields = {"call_id": call_id, "name": tool.name, "server_label": label}
        self.emit(OutputKind.MCP_CALL, text=call.arguments, approval_request_id=approval, **fields)
        try:
            output = await mcp.call_tool(tool.server, tool.name, json.loads(call.arguments))
        except mcp.McpFailure as failure:
            logger.warning("MCP call of %r failed: %s", tool.name[:64], failure)
            self.emit(
                OutputKind.MCP_CALL_DONE, status="failed", code=failure.kind, text=str(failure), **fields
            )
            return f"The tool failed: {failure}"
        self.emit(OutputKind.MCP_CALL_DONE, status="completed", text=output, **fields)
        return output

    async def _approved(self, approval: str, tool: mcp.ListedTool, arguments: str) -> bool:
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.approvals[approval] = answer
        self.emit(
            OutputKind.MCP_APPROVAL_REQUEST,
            call_id=approval,
            name=tool.name,
            server_label=tool.server.server_label,
            text=arguments,
        )
        try:
            async with asyncio.timeout(mcp.APPROVAL_TIMEOUT_S):
                return await answer
        except TimeoutError:
            return False
        finally:
            self.approvals.pop(approval, None)
