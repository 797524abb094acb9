"""Function tools and the tool choice: parsed from the Realtime shape, handed on in the chat shape.

A Realtime client declares tools flat (``{"type": "function", "name", "description",
"parameters"}``) in ``session.update`` or per ``response.create``, and picks how
the model may use them with ``tool_choice``: ``auto``, ``none``, ``required``, or
one named function (``{"type": "function", "name": ...}``). Language models
behind OpenAI-compatible chat endpoints take the nested chat shape
(``{"type": "function", "function": {...}}``), so ``chat_tools`` and
``chat_tool_choice`` translate. Parsing is pure and all-or-nothing: a bad
definition raises ``invalid_value`` with the ``param`` that names it, and the
session keeps what it had.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from livegen.protocol.errors import INVALID_VALUE
from livegen.voice.mcp_tools import MAX_SERVERS, McpTool, parse_mcp_tool

#: OpenAI's bounds: 128 tools a request, names of 1-64 letters, digits, underscores or dashes.
MAX_TOOLS = 128
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
CHOICES = ("auto", "none", "required")


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    #: The JSON Schema of the arguments (an object schema).
    parameters: dict[str, Any]

    def to_wire(self) -> dict[str, Any]:
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }

    def to_chat(self) -> dict[str, Any]:
        function = {"name": self.name, "description": self.description, "parameters": self.parameters}
        return {"type": "function", "function": function}


#: ``auto``, ``none``, ``required``, or the name of the one function the model must call.
ToolChoice = str


def _refuse(detail: str, param: str) -> Exception:
    return INVALID_VALUE.error(detail=detail, param=param)


def parse_tools(value: Any, param: str) -> tuple[Tool, ...]:
    """The function tools of a ``tools`` field; each mistake names its ``param`` (``session.tools[1].name``).
    MCP tools belong to the session (``parse_session_tools``)."""
    return parse_session_tools(value, param, allow_mcp=False)[0]


def parse_session_tools(
    value: Any, param: str, allow_mcp: bool = True
) -> tuple[tuple[Tool, ...], tuple[McpTool, ...]]:
    """A session's function tools and its remote MCP servers (``{"type": "mcp"}``)."""
    if not isinstance(value, list):
        raise _refuse(f"{param} must be a list of tools, got {value!r}", param)
    if len(value) > MAX_TOOLS:
        raise _refuse(f"{param} holds {len(value)} tools; at most {MAX_TOOLS} are allowed", param)
    tools: list[Tool] = []
    servers: list[McpTool] = []
    for index, raw in enumerate(value):
        if allow_mcp and isinstance(raw, dict) and raw.get("type") == "mcp":
            if len(servers) == MAX_SERVERS:
                detail = f"{param} names more than {MAX_SERVERS} MCP servers, the most one session may"
                raise _refuse(detail, f"{param}[{index}]")
            server = parse_mcp_tool(raw, f"{param}[{index}]")
            if any(s.server_label == server.server_label for s in servers):
                detail = f"two MCP servers are labelled {server.server_label!r}"
                raise _refuse(detail, f"{param}[{index}].server_label")
            servers.append(server)
            continue
        tool = _tool(raw, f"{param}[{index}]")
        if any(t.name == tool.name for t in tools):
            raise _refuse(f"two tools are named {tool.name!r}", f"{param}[{index}].name")
        tools.append(tool)
    return tuple(tools), tuple(servers)


def _tool(raw: Any, param: str) -> Tool:
    if not isinstance(raw, dict):
        raise _refuse(f"{param} must be an object, got {raw!r}", param)
    if raw.get("type") == "mcp":
        detail = "MCP tools are a session's: set them with session.update, not per response"
        raise _refuse(detail, f"{param}.type")
    if raw.get("type", "function") != "function":
        detail = f"tool type {raw.get('type')!r} is not supported; only 'function' tools are"
        raise _refuse(detail, f"{param}.type")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        detail = f"{param}.name must be 1-64 letters, digits, underscores or dashes, got {name!r}"
        raise _refuse(detail, f"{param}.name")
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise _refuse(f"{param}.description must be a string", f"{param}.description")
    parameters = raw.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
        detail = f"{param}.parameters must be a JSON Schema object schema (type 'object'), got {parameters!r}"
        raise _refuse(detail, f"{param}.parameters")
    properties = parameters.get("properties", {})
    if not isinstance(properties, dict) or not all(isinstance(p, dict) for p in properties.values()):
        detail = f"{param}.parameters.properties must map names to schemas"
        raise _refuse(detail, f"{param}.parameters.properties")
    return Tool(name, description, parameters)


def parse_tool_choice(value: Any, tools: tuple[Tool, ...], param: str) -> ToolChoice:
    """``auto``/``none``/``required``, or a named function that must be among ``tools``."""
    if isinstance(value, str):
        if value not in CHOICES:
            raise _refuse(f"{param} must be auto, none, required or a function, got {value!r}", param)
        return value
    if not isinstance(value, dict) or value.get("type") != "function":
        raise _refuse(f"{param} must be auto, none, required or a function, got {value!r}", param)
    # GA names the function flat; the chat shape (which some clients send) nests it.
    nested = value.get("function")
    name = value.get("name", nested.get("name") if isinstance(nested, dict) else None)
    if not isinstance(name, str) or not any(t.name == name for t in tools):
        detail = f"{param} names function {name!r}, which is not among the tools"
        raise _refuse(detail, f"{param}.name")
    return name


def choice_to_wire(choice: ToolChoice) -> Any:
    return choice if choice in CHOICES else {"type": "function", "name": choice}


def chat_tool_choice(choice: ToolChoice) -> Any:
    return choice if choice in CHOICES else {"type": "function", "function": {"name": choice}}


def is_valid_choice(choice: ToolChoice, tools: tuple[Tool, ...]) -> bool:
    return choice in CHOICES or any(t.name == choice for t in tools)


def check_choice(choice: ToolChoice, tools: tuple[Tool, ...], param: str) -> None:
    """A named choice must stay among the tools when the tools change."""
    if choice not in CHOICES and not any(t.name == choice for t in tools):
        raise _refuse(f"{param} names function {choice!r}, which is not among the tools", param)
