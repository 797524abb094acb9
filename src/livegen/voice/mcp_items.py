"""The items of remote MCP tools: their wire form, their cost, and what the model sees of them.

Four item types belong to MCP (OpenAI's Realtime ``mcp_*`` items): ``mcp_list_tools`` (a server's
tools, listed when the session names the server), ``mcp_call`` (a call the server made itself, with
its ``output`` or ``error``), ``mcp_approval_request`` (the model wants to call a tool that needs
the client's approval) and ``mcp_approval_response`` (the client's answer, the one a client
creates). An ``Item`` keeps their own fields in ``Item.mcp``; this module reads them. In the
model's history a call that ended is a tool call and its output (or its error), as a function
call is, so a later answer knows what the tool said.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from livegen.models.voice import HistoryTurn
from livegen.protocol.errors import INVALID_VALUE
from livegen.protocol.realtime.items import (
    ItemObject,
    McpApprovalRequestItem,
    McpApprovalResponseItem,
    McpCallItem,
    McpListToolsItem,
)


class Item(Protocol):
    """A conversation item as this module reads it (``voice/conversation.py``'s ``Item``, which
    calls this module: declared here so that the two do not import each other)."""

    @property
    def id(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def text(self) -> str | None: ...
    @property
    def server_label(self) -> str: ...
    @property
    def mcp(self) -> dict[str, Any] | None: ...


#: The longest ``reason`` a client may give with its approval response.
MAX_REASON_CHARS = 4096


def mcp_object(item: Item) -> ItemObject:
    fields = item.mcp or {}
    if item.type == "mcp_list_tools":
        return McpListToolsItem(
            id=item.id, server_label=item.server_label, tools=list(fields.get("tools", []))
        )
    if item.type == "mcp_call":
        return McpCallItem(
            id=item.id,
            server_label=item.server_label,
            name=item.name,
            arguments=item.text or "",
            approval_request_id=fields.get("approval_request_id") or None,
            output=fields.get("output"),
            error=fields.get("error"),
        )
    if item.type == "mcp_approval_request":
        return McpApprovalRequestItem(
            id=item.id, server_label=item.server_label, name=item.name, arguments=item.text or ""
        )
    return McpApprovalResponseItem(
        id=item.id,
        approval_request_id=str(fields.get("approval_request_id", "")),
        approve=bool(fields.get("approve")),
        reason=fields.get("reason"),
    )


def mcp_chars(fields: dict[str, Any]) -> int:
    """What an MCP item's own fields cost the history's budget (its tools, output or error)."""
    size = len(fields.get("output") or "") + len(fields.get("reason") or "")
    if fields.get("tools"):
        size += len(json.dumps(fields["tools"]))
    if fields.get("error"):
        size += len(json.dumps(fields["error"]))
    return size


def approval_response(raw: dict[str, Any]) -> dict[str, Any]:
    """The fields of a client's ``mcp_approval_response`` item (which request, yes or no, why)."""
    request_id = raw.get("approval_request_id")
    if not isinstance(request_id, str) or not request_id:
        raise INVALID_VALUE.error(
            detail="item.approval_request_id must name an mcp_approval_request item",
            param="item.approval_request_id",
        )
    approve = raw.get("approve")
    if not isinstance(approve, bool):
        raise INVALID_VALUE.error(detail="item.approve must be true or false", param="item.approve")
    reason = raw.get("reason")
    if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS):
        detail = f"item.reason must be a string of at most {MAX_REASON_CHARS} characters"
        raise INVALID_VALUE.error(detail=detail, param="item.reason")
    return {"approval_request_id": request_id, "approve": approve, "reason": reason}


def mcp_history(item: Item) -> list[HistoryTurn]:
    """An ended MCP call as the language model sees it: a tool call and what it answered."""
    fields = item.mcp or {}
    if fields.get("output") is None and fields.get("error") is None:
        return []  # still running, or never ran
    answer = fields.get("output")
    if answer is None:
        answer = f"error: {(fields.get('error') or {}).get('message', 'the tool failed')}"
    return [
        HistoryTurn("assistant", item.text or "{}", "function_call", item.id, item.name),
        HistoryTurn("tool", answer, "function_call_output", item.id, item.name),
    ]
