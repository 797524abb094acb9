"""A real MCP server on loopback, written with the official ``mcp`` package (``MCPServer``,
streamable HTTP), for the MCP conformance tests: tools that answer, fail, hang, answer too much,
and one that needs approval. It records the headers of every request it gets."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer


@dataclass
class McpHost:
    url: str
    #: Every request's headers (lower-cased names).
    headers: list[dict[str, str]] = field(default_factory=list)
    #: Every call that reached a tool: (name, arguments).
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def _server(host: McpHost) -> MCPServer:
    server = MCPServer("livegen-test")

    @server.tool()
    def weather(city: str) -> str:
        """The weather in a city."""
        host.calls.append(("weather", {"city": city}))
        return f"Sunny and 21 degrees in {city}."

    @server.tool()
    def broken() -> str:
        """A tool that always fails."""
        host.calls.append(("broken", {}))
        raise ValueError("the weather station is down")

    @server.tool()
    async def hang() -> str:
        """A tool that never answers in time."""
        host.calls.append(("hang", {}))
        await asyncio.sleep(30)
        return "too late"

    @server.tool()
    def flood() -> str:
        """A tool that answers far too much."""
        host.calls.append(("flood", {}))
        return "x" * 200_000

    @server.tool()
    def delete_file(path: str) -> str:
        """Delete a file (needs the user's approval)."""
        host.calls.append(("delete_file", {"path": path}))
        return f"deleted {path}"

    return server


@contextmanager
def serve_mcp() -> Iterator[McpHost]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    host = McpHost(url=f"http://127.0.0.1:{sock.getsockname()[1]}/mcp")
    app = _server(host).streamable_http_app()

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            host.headers.append({k.decode().lower(): v.decode() for k, v in scope["headers"]})
        await app(scope, receive, send)

    server = uvicorn.Server(uvicorn.Config(recording, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield host
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
