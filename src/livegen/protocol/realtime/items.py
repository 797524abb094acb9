"""Conversation items and content parts as the Realtime wire carries them (server to client).

An item is a message (one content part, and a user's images after it), a function call or a function
call's output, or one of a remote MCP server's (its tool list, a call the server made, an approval
request and the client's answer to it). Field order follows OpenAI's objects, so the encoded JSON is
the same bytes livegen sent when these were dicts. Content parts are tagged by
``type``: the GA part types name the direction (``output_audio``), beta's the
medium (``audio``); ``beta.py`` maps one onto the other.
"""

from __future__ import annotations

from typing import Any

import msgspec


class InputTextPart(msgspec.Struct, tag="input_text", tag_field="type"):
    text: str | None


class InputAudioPart(msgspec.Struct, tag="input_audio", tag_field="type"):
    transcript: str | None


class InputImagePart(msgspec.Struct, tag="input_image", tag_field="type"):
    """An image in a user message: a ``data:image/png`` or ``image/jpeg`` base64 URI."""

    image_url: str
    detail: str = "auto"


class OutputTextPart(msgspec.Struct, tag="output_text", tag_field="type"):
    text: str | None


class OutputAudioPart(msgspec.Struct, tag="output_audio", tag_field="type"):
    transcript: str | None


class TextPart(msgspec.Struct, tag="text", tag_field="type"):
    """A text part of a response (``response.content_part.*``), and beta's ``output_text``."""

    text: str | None


class AudioPart(msgspec.Struct, tag="audio", tag_field="type"):
    """An audio part of a response (``response.content_part.*``), and beta's ``output_audio``."""

    transcript: str | None


#: The parts that hold words (as ``text`` or ``transcript``).
WordsPart = InputTextPart | InputAudioPart | OutputTextPart | OutputAudioPart | TextPart | AudioPart
ContentPart = WordsPart | InputImagePart

_PARTS: dict[str, type[WordsPart]] = {
    "input_text": InputTextPart,
    "input_audio": InputAudioPart,
    "output_text": OutputTextPart,
    "output_audio": OutputAudioPart,
    "text": TextPart,
    "audio": AudioPart,
}


def content_part(kind: str, text: str | None) -> WordsPart:
    """The part of type ``kind`` holding ``text`` (as ``text`` or ``transcript``, as the type has it)."""
    return _PARTS[kind](text)


class MessageItem(msgspec.Struct, kw_only=True):
    id: str
    object: str = "realtime.item"
    type: str = "message"
    role: str
    status: str
    content: list[ContentPart]
    #: An answer's ``commentary`` (a spoken preamble) or ``final_answer``; omitted for one of neither.
    phase: str | msgspec.UnsetType = msgspec.UNSET


class FunctionCallItem(msgspec.Struct, kw_only=True):
    id: str
    object: str = "realtime.item"
    type: str = "function_call"
    status: str
    call_id: str
    name: str
    arguments: str


class FunctionCallOutputItem(msgspec.Struct, kw_only=True):
    id: str
    object: str = "realtime.item"
    type: str = "function_call_output"
    status: str
    call_id: str
    output: str


class McpListToolsItem(msgspec.Struct, kw_only=True):
    """The tools a session's MCP server listed (``tools`` empty while listing)."""

    id: str
    type: str = "mcp_list_tools"
    server_label: str
    tools: list[dict[str, Any]]


class McpCallItem(msgspec.Struct, kw_only=True):
    """A call the server made to an MCP tool: ``output``, or ``error`` (``{type, message[, code]}``)."""

    id: str
    type: str = "mcp_call"
    server_label: str
    name: str
    arguments: str
    approval_request_id: str | None
    output: str | None
    error: dict[str, Any] | None


class McpApprovalRequestItem(msgspec.Struct, kw_only=True):
    id: str
    type: str = "mcp_approval_request"
    server_label: str
    name: str
    arguments: str


class McpApprovalResponseItem(msgspec.Struct, kw_only=True):
    id: str
    type: str = "mcp_approval_response"
    approval_request_id: str
    approve: bool
    reason: str | None


ItemObject = (
    MessageItem
    | FunctionCallItem
    | FunctionCallOutputItem
    | McpListToolsItem
    | McpCallItem
    | McpApprovalRequestItem
    | McpApprovalResponseItem
)
