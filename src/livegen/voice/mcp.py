"""A session's remote MCP servers, in the core: their tool lists and the calls the model makes.

The model is the MCP client (it lists each server's tools, offers them to its language model and
calls them itself, ``models/voice.py`` ``McpServer``); the core keeps the conversation and the
wire. When a ``session.update`` names a server, the core gives it an ``mcp_list_tools`` item
(``conversation.item.added``, ``mcp_list_tools.in_progress``) and the model reports the tools
(``.completed`` and ``conversation.item.done``) or why it could not (``.failed``). Within a
response, a call the model makes becomes an ``mcp_call`` item (its arguments, ``in_progress``,
then ``completed`` with the output or ``failed`` with the error), and a call that needs approval
first an ``mcp_approval_request`` item: the request waits, pending, until the client creates an
``mcp_approval_response`` item naming it (``answer``), or the response ends.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from livegen.models.voice import OutputKind, VoiceOutput
from livegen.protocol.errors import INVALID_VALUE
from livegen.protocol.realtime import server as ev
from livegen.voice.chain import Effect, Send
from livegen.voice.config import Config
from livegen.voice.conversation import Conversation, Item
from livegen.voice.response import Response

#: Stamps an event for sending (the session's and the speaker's ``_send``).
Sender = Callable[[ev.ServerEvent], Send]

#: Error types of an ``mcp_call``'s ``error`` (OpenAI's); any other code is a tool's own error.
ERROR_TYPES = ("protocol_error", "tool_execution_error", "http_error")


def with_servers(old: Config, new: Config, ids: Any, timeout_s: float) -> tuple[Config, list[Item]]:
    """``new`` with each MCP server given its ``mcp_list_tools`` item: an unchanged server keeps
    the one it had, a new or changed one gets a new item (returned, to announce)."""
    before = {tool: server for tool, server in zip(old.mcp_tools, old.mcp_servers, strict=False)}
    servers, items = [], []
    for tool in new.mcp_tools:
        server = before.get(tool)
        if server is None:
            item = Item(
                id=ids("item"),
                role="assistant",
                content_type="",
                status="in_progress",
                type="mcp_list_tools",
                server_label=tool.server_label,
                mcp={"tools": []},
            )
            items.append(item)
            server = tool.server(item.id, timeout_s)
        servers.append(server)
    return replace(new, mcp_servers=tuple(servers)), items


def listing(items: list[Item], conversation: Conversation, send: Sender) -> list[Effect]:
    """Announce each new server's list item: added, and its listing in progress."""
    effects: list[Effect] = []
    for item in items:
        previous = conversation.add(item)
        effects.append(send(ev.ItemAdded(item=item.to_object(), previous_item_id=previous)))
        effects.append(send(ev.McpListToolsInProgress(item_id=item.id)))
    return effects


def listed(output: VoiceOutput, conversation: Conversation, send: Sender) -> list[Effect]:
    """The model's report on a server's tools: the item completed with them, or failed."""
    item = conversation.find(output.item_id or "")
    if item is None or item.type != "mcp_list_tools" or item.status != "in_progress":
        return []  # the item left the history, or a newer listing replaced it
    if output.kind is OutputKind.MCP_TOOLS_FAILED:
        item.status = "failed"
        return [
            send(ev.McpListToolsFailed(item_id=item.id)),
            send(ev.ItemDone(item=item.to_object(), previous_item_id=None)),
        ]
    try:
        tools = json.loads(output.text)
    except ValueError:
        tools = []
    item.mcp = {"tools": tools if isinstance(tools, list) else []}
    item.status = "completed"
    return [
        send(ev.McpListToolsCompleted(item_id=item.id)),
        send(ev.ItemDone(item=item.to_object(), previous_item_id=None)),
    ]


def _added(response: Response, item: Item, conversation: Conversation, send: Sender) -> list[Effect]:
    response.outputs.append(item)
    index = response.output_index(item)
    effects: list[Effect] = [
        send(ev.OutputItemAdded(response_id=response.id, output_index=index, item=item.to_object()))
    ]
    if response.conversation != "none":
        previous = conversation.add(item)
        effects.append(send(ev.ItemAdded(item=item.to_object(), previous_item_id=previous)))
    return effects


def _done(response: Response, item: Item, send: Sender) -> list[Effect]:
    index = response.output_index(item)
    effects: list[Effect] = [
        send(ev.OutputItemDone(response_id=response.id, output_index=index, item=item.to_object()))
    ]
    if response.conversation != "none":
        effects.append(send(ev.ItemDone(item=item.to_object(), previous_item_id=None)))
    return effects


def on_output(
    response: Response, output: VoiceOutput, conversation: Conversation, ids: Any, send: Sender
) -> list[Effect]:
    """An MCP output of the live ``response``: a call begun, a call ended, an approval request."""
    if output.kind is OutputKind.MCP_APPROVAL_REQUEST:
        item = Item(
            id=output.call_id or ids("mcpr"),
            role="assistant",
            content_type="",
            text=output.text,
            type="mcp_approval_request",
            name=output.name,
            server_label=output.server_label,
            mcp={},
        )
        if item.id in conversation:
            return []  # an id the conversation holds already: not an approval request we can name
        return _added(response, item, conversation, send) + _done(response, item, send)
    if output.kind is OutputKind.MCP_CALL:
        return _call_begun(response, output, conversation, ids, send)
    return _call_ended(response, output, send)


def _call_begun(
    response: Response, output: VoiceOutput, conversation: Conversation, ids: Any, send: Sender
) -> list[Effect]:
    item = Item(
        id=ids("item"),
        role="assistant",
        content_type="",
        text=output.text,
        status="in_progress",
        type="mcp_call",
        name=output.name,
        server_label=output.server_label,
        mcp={"call_id": output.call_id, "approval_request_id": output.approval_request_id or None},
    )
    effects = _added(response, item, conversation, send)
    index = response.output_index(item)
    refs: dict[str, Any] = {"response_id": response.id, "item_id": item.id, "output_index": index}
    effects.append(send(ev.McpCallArgumentsDelta(delta=output.text, **refs)))
    effects.append(send(ev.McpCallArgumentsDone(arguments=output.text, **refs)))
    effects.append(send(ev.McpCallInProgress(item_id=item.id, output_index=index)))
    return effects


def _call_ended(response: Response, output: VoiceOutput, send: Sender) -> list[Effect]:
    item = next(
        (
            i
            for i in response.outputs
            if i.type == "mcp_call"
            and i.status == "in_progress"
            and (i.mcp or {}).get("call_id") == output.call_id
        ),
        None,
    )
    if item is None:
        return []
    fields = dict(item.mcp or {})
    index = response.output_index(item)
    if output.status == "completed":
        fields["output"] = output.text
        item.status = "completed"
        effects = [send(ev.McpCallCompleted(item_id=item.id, output_index=index))]
    else:
        kind = output.code if output.code in ERROR_TYPES else "tool_execution_error"
        fields["error"] = {"type": kind, "message": output.text or "the MCP tool failed"}
        if kind != "tool_execution_error":
            fields["error"]["code"] = -1 if kind == "protocol_error" else 502
        item.status = "failed"
        effects = [send(ev.McpCallFailed(item_id=item.id, output_index=index))]
    item.mcp = fields
    return effects + _done(response, item, send)


def abandon(response: Response) -> None:
    """A response that ended with MCP calls still running: they failed with it."""
    for item in response.outputs:
        if item.type == "mcp_call" and item.status == "in_progress":
            item.status = "incomplete"
            item.mcp = {
                **(item.mcp or {}),
                "error": {"type": "tool_execution_error", "message": "the response ended"},
            }


def check_answer(item: Item, response: Response | None) -> str:
    """The approval request an ``mcp_approval_response`` answers: one of the live response's."""
    request_id = str((item.mcp or {}).get("approval_request_id", ""))
    pending = response is not None and any(
        i.type == "mcp_approval_request" and i.id == request_id and not (i.mcp or {}).get("answered")
        for i in response.outputs
    )
    if not pending:
        detail = f"no pending mcp_approval_request has id {request_id!r} (its response may have ended)"
        raise INVALID_VALUE.error(detail=detail, param="item.approval_request_id")
    return request_id


def answered(response: Response, request_id: str) -> None:
    for item in response.outputs:
        if item.id == request_id:
            item.mcp = {**(item.mcp or {}), "answered": True}
