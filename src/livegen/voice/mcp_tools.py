"""Remote MCP tools (``{"type": "mcp"}``): parsed from a session's ``tools``, checked against the
hosts the operator allows, echoed without their secrets.

A client names an MCP server by URL and the server (livegen's model) connects to it, so the URL is
the operator's to allow (``--mcp-allowed-hosts``): a server_url whose host is not listed is refused
with ``invalid_value`` naming the option, and by default none is. ``headers`` and
``authorization`` are the client's secrets for that server: they travel to the model in the
stream configuration and nowhere else; the session object echoes the tool without them.

``require_approval`` is ``always`` (OpenAI's default), ``never``, or a filter
``{"always": {"tool_names": [...]}, "never": {"tool_names": [...]}}``: a tool named in neither
list needs approval (the safe side). Parsing is pure and all-or-nothing, as ``tools.py``'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from livegen.models.voice import McpServer
from livegen.protocol.errors import INVALID_VALUE

_LABEL = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: Fields of OpenAI's MCP tool livegen cannot honour: refused by name, never ignored.
_UNSUPPORTED = ("connector_id", "tunnel_id")
MAX_HEADERS = 32
#: MCP servers one session may name: each is listed on its own connection when named.
MAX_SERVERS = 16
MAX_HEADER_BYTES = 8192
#: Headers a client may not set for its MCP server: ``Host`` would reach a virtual host behind an
#: allowed address that the operator never allowed; hop-by-hop and framing headers belong to the
#: connection (one could smuggle a second request); the MCP session's own are the client library's.
_FORBIDDEN_HEADERS = frozenset(
    {
        "host",
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "content-encoding",
        "content-type",
        "accept-encoding",
        "expect",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
    }
)
#: A header name as HTTP spells one (RFC 9110's token).
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


@dataclass(frozen=True)
class McpTool:
    server_label: str
    server_url: str
    allowed_tools: tuple[str, ...] | None = None
    approval_by_default: bool = True
    always_approve: tuple[str, ...] = ()
    never_approve: tuple[str, ...] = ()
    server_description: str = ""
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def to_wire(self) -> dict[str, Any]:
        """The tool as the session object echoes it: never its headers or authorization."""
        wire: dict[str, Any] = {
            "type": "mcp",
            "server_label": self.server_label,
            "server_url": self.server_url,
        }
        if self.allowed_tools is not None:
            wire["allowed_tools"] = list(self.allowed_tools)
        wire["require_approval"] = self._approval_to_wire()
        if self.server_description:
            wire["server_description"] = self.server_description
        return wire

    def _approval_to_wire(self) -> Any:
        if not self.always_approve and not self.never_approve:
            return "always" if self.approval_by_default else "never"
        return {
            "always": {"tool_names": list(self.always_approve)},
            "never": {"tool_names": list(self.never_approve)},
        }

    def server(self, list_item_id: str, timeout_s: float) -> McpServer:
        return McpServer(
            self.server_label,
            self.server_url,
            list_item_id,
            self.allowed_tools,
            self.approval_by_default,
            self.always_approve,
            self.never_approve,
            self.headers,
            timeout_s,
        )


def _refuse(detail: str, param: str) -> Exception:
    return INVALID_VALUE.error(detail=detail, param=param)


def parse_mcp_tool(raw: dict[str, Any], param: str) -> McpTool:
    """One ``{"type": "mcp"}`` tool; each mistake names its ``param``."""
    for name in _UNSUPPORTED:
        if raw.get(name) is not None:
            raise _refuse(
                f"{param}.{name} is not supported; give the MCP server's server_url", f"{param}.{name}"
            )
    label = raw.get("server_label")
    if not isinstance(label, str) or not _LABEL.match(label):
        detail = f"{param}.server_label must be 1-64 letters, digits, underscores or dashes, got {label!r}"
        raise _refuse(detail, f"{param}.server_label")
    url = _server_url(raw.get("server_url"), f"{param}.server_url")
    description = raw.get("server_description") or ""
    if not isinstance(description, str):
        raise _refuse(f"{param}.server_description must be a string", f"{param}.server_description")
    always, never, by_default = _approval(raw.get("require_approval"), f"{param}.require_approval")
    return McpTool(
        label,
        url,
        _allowed(raw.get("allowed_tools"), f"{param}.allowed_tools"),
        by_default,
        always,
        never,
        description,
        _headers(raw.get("headers"), raw.get("authorization"), param),
    )


def _server_url(url: Any, param: str) -> str:
    """An http(s) URL with a host, a port that is a number in range, and no userinfo (a password in
    the URL would be echoed with it: secrets go in ``authorization`` or ``headers``)."""
    try:
        parts = urlsplit(url) if isinstance(url, str) else None
        port = parts.port if parts is not None else None  # raises for a port out of range or not a number
    except ValueError:  # a broken IPv6 literal ("http://[::1/mcp"), a bad port
        parts, port = None, None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
        # never the URL itself: it may hold a password
        raise _refuse(f"{param} must be an http or https URL with a host and a valid port", param)
    if parts.username is not None or parts.password is not None:
        detail = f"{param} must not hold a user name or password; give the secret as authorization or headers"
        raise _refuse(detail, param)
    text = str(url)
    if any(c in text for c in "\r\n\t\0 "):
        raise _refuse(f"{param} must not hold spaces or control characters", param)
    return text


def _names(value: Any, param: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise _refuse(f"{param} must be a list of tool names", param)
    return tuple(value)


def _allowed(value: Any, param: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, dict):
        if value.get("read_only") is not None:
            raise _refuse(f"{param}.read_only is not supported; list the tool_names", f"{param}.read_only")
        return _names(value.get("tool_names", []), f"{param}.tool_names")
    return _names(value, param)


def _approval(value: Any, param: str) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
    """(always, never, whether a tool in neither needs approval)."""
    if value is None or value == "always":
        return (), (), True
    if value == "never":
        return (), (), False
    if not isinstance(value, dict):
        raise _refuse(f"{param} must be 'always', 'never' or a filter object, got {value!r}", param)
    lists = []
    for key in ("always", "never"):
        part = value.get(key) or {}
        if not isinstance(part, dict):
            raise _refuse(f"{param}.{key} must be an object with tool_names", f"{param}.{key}")
        if part.get("read_only") is not None:
            raise _refuse(f"{param}.{key}.read_only is not supported", f"{param}.{key}.read_only")
        lists.append(_names(part.get("tool_names", []), f"{param}.{key}.tool_names"))
    return lists[0], lists[1], True


def _headers(value: Any, authorization: Any, param: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        value = {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _refuse(f"{param}.headers must map header names to strings", f"{param}.headers")
    if authorization is not None and not isinstance(authorization, str):
        raise _refuse(f"{param}.authorization must be a string", f"{param}.authorization")
    headers = dict(value)
    if authorization:
        headers["Authorization"] = f"Bearer {authorization}"
    size = sum(len(k) + len(v) for k, v in headers.items())
    if len(headers) > MAX_HEADERS or size > MAX_HEADER_BYTES:
        detail = f"{param}.headers: at most {MAX_HEADERS} headers of {MAX_HEADER_BYTES} bytes in all"
        raise _refuse(detail, f"{param}.headers")
    if any(any(c in k + v for c in "\r\n\0") for k, v in headers.items()):
        raise _refuse(f"{param}.headers must not hold line breaks", f"{param}.headers")
    for name in value:
        if not _TOKEN.match(name) or name.lower() in _FORBIDDEN_HEADERS:
            detail = f"{param}.headers may not set {name[:64]!r}: it is not a client's to give an MCP server"
            raise _refuse(detail, f"{param}.headers")
    return tuple(headers.items())


def check_hosts(tools: tuple[McpTool, ...], allowed_hosts: tuple[str, ...], param: str) -> None:
    """Each server_url must reach a host the operator allows (``--mcp-allowed-hosts``)."""
    for tool in tools:
        parts = urlsplit(tool.server_url)
        host = (parts.hostname or "").lower()
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if host in allowed_hosts or f"{host}:{port}" in allowed_hosts:
            continue
        detail = (
            f"the server_url of MCP server {tool.server_label!r} reaches host {host!r}, which this server "
            "does not allow; its operator allows MCP hosts with `livegen serve --mcp-allowed-hosts`"
        )
        raise _refuse(detail, param)
