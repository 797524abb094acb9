"""What one MCP server may cost this server: the bytes of each answer, and requests at once.

The ``mcp`` package reads an answer sent as JSON whole (``response.aread()``) before it parses it,
with no bound (its ``max_sse_event_size`` covers one SSE event, not a stream of them), so a
hostile server could grow this process without end or hold its event loop in one long parse.
``BoundedTransport`` sits under the package's ``httpx2`` client and counts every answer's bytes as
they arrive: a ``tools/list`` answer at most ``MAX_LIST_BYTES``, a ``tools/call`` answer at most
``MAX_CALL_BYTES``, anything else (``initialize``, the notification stream) ``MAX_OTHER_BYTES``.
An answer also holds at most ``MAX_OBJECTS`` JSON objects, since parsing costs per object. The
first byte past a cap ends that answer (``AnswerTooLarge``) and trips the connection's ``Budget``,
which the caller turns into that listing's or call's failure; nothing past the cap is read or
parsed, so a parse on the loop costs at most one capped answer. Compressed answers are
refused (a small body may inflate without bound); the client asks for none.

``gate()`` bounds how many connections to MCP servers the whole process holds at once
(``MAX_AT_ONCE``, per event loop); a request that finds none free within its deadline fails.

``quiet_mcp_logs()`` keeps the package's own log lines about a bad answer (``logger.exception``,
a traceback) to one debug line: the listing or call that failed logs its own warning.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx2

#: The most bytes one answer may hold, by the request it answers.
MAX_LIST_BYTES = 2 * 1024 * 1024
MAX_CALL_BYTES = 1024 * 1024
MAX_OTHER_BYTES = 64 * 1024
#: The most JSON objects (counted as ``{`` bytes, an upper bound whatever the escapes) one answer
#: may hold: parsing costs per object (10,000 tools of a few objects each take ~0.3 s), and every
#: tool or content part is one.
MAX_OBJECTS = 4096
#: Connections to MCP servers this process holds at once (listings and calls of every session).
MAX_AT_ONCE = 16
_CAPS = {"tools/list": MAX_LIST_BYTES, "tools/call": MAX_CALL_BYTES}
_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


class AnswerTooLarge(httpx2.StreamError):
    """An answer passed its cap (a ``StreamError``, which the ``mcp`` package turns into that
    request's error rather than its own crash)."""


@dataclass
class Budget:
    """One connection's record of the answer that passed its cap (empty while none has), and
    the event its caller waits on to fail that listing or call at once."""

    exceeded: str = ""
    tripped: asyncio.Event = field(default_factory=asyncio.Event)

    def trip(self, why: str) -> None:
        self.exceeded = self.exceeded or why
        self.tripped.set()


def _cap(request: httpx2.Request) -> tuple[int, str]:
    """The byte cap of the answer to ``request`` and what that answer is (its JSON-RPC method)."""
    method = ""
    if request.method == "POST":
        try:
            method = str(json.loads(request.content).get("method", ""))
        except (ValueError, AttributeError, httpx2.RequestNotRead):
            method = ""
    return _CAPS.get(method, MAX_OTHER_BYTES), f"its {method or 'other'} answer"


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, cap: int, what: str, budget: Budget) -> None:
        self._inner, self._cap, self._what, self._budget = inner, cap, what, budget

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = objects = 0
        async for chunk in self._inner:
            seen, objects = seen + len(chunk), objects + chunk.count(b"{")
            if seen > self._cap or objects > MAX_OBJECTS:
                limit = f"{self._cap} bytes" if seen > self._cap else f"{MAX_OBJECTS} JSON objects"
                why = f"{self._what} passed {limit}" if self._cap >= 0 else self._what
                self._budget.trip(why)
                raise AnswerTooLarge(why)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class BoundedTransport(httpx2.AsyncBaseTransport):
    """The ``httpx2`` transport of one MCP connection: every answer's bytes capped."""

    def __init__(self, budget: Budget) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self._budget = budget

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        cap, why = _cap(request)
        if response.headers.get("content-encoding", "identity").lower() not in ("", "identity"):
            cap, why = -1, "it sent a compressed answer, which was not asked for"
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = _CappedStream(response.stream, cap, why, self._budget)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def gate() -> asyncio.Semaphore:
    """This event loop's bound on connections to MCP servers."""
    loop = asyncio.get_running_loop()
    if loop not in _gates:
        _gates[loop] = asyncio.Semaphore(MAX_AT_ONCE)
    return _gates[loop]


class _OneLine(logging.Filter):
    """The ``mcp`` package's lines about a bad answer: one debug line, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            record.msg = f"{record.getMessage()}: {type(error).__name__}: {str(error)[:200]}"
            record.args, record.exc_info, record.exc_text = None, None, None
        if record.levelno > logging.INFO:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(record.levelno)


def quiet_mcp_logs() -> None:
    for name in ("mcp.client.streamable_http", "mcp.client.session", "mcp.shared.jsonrpc_dispatcher"):
        target = logging.getLogger(name)
        if not any(isinstance(f, _OneLine) for f in target.filters):
            target.addFilter(_OneLine())
