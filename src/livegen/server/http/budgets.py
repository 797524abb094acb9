"""Per-connection budgets that hold whatever a client does: connections, first message, unsent bytes.

``ConnectionBudgetMiddleware`` guards every WebSocket route:

- at most ``max_connections`` sockets are open at once (all routes
  together); one more is refused at the handshake with HTTP 503 and a JSON
  ``too_many_connections`` error, before any session work is done;
- a socket that sends nothing within ``first_message_timeout_s`` of its
  handshake (no ``session.update``, no event) is closed with
  ``CLOSE_FIRST_MESSAGE_TIMEOUT``. The app sees an ordinary clean disconnect
  (code 1000), so a voice session ends rather than parks for a resume.

After a mass of connections ends (their count falls to a quarter of its
peak, and by at least ``TRIM_AFTER`` connections), and after every
``TRIM_EVERY`` ended connections under steady churn, glibc's ``malloc_trim``
is called in a thread: glibc keeps freed session memory in its arenas, and
``livegen bench churn`` measured that trimming gives about half of it back.
Before any thread starts, ``livegen serve`` also caps glibc's arenas at the
number of cores (``limit_malloc_arenas``; glibc's default is eight per core):
every thread that ever mallocs (model threads, ``to_thread`` workers) can
otherwise hold an arena of its own, and the churn bench measured the retained
memory after 3,000 sessions fall from +524 MiB to +132 MiB with the cap.

The unsent-bytes budget (bytes queued for a socket but not yet written) is
enforced where the bytes queue, by each endpoint's sender; its close code is
``CLOSE_NOT_READING``. Every budget is a gauge of ``/metrics``
(``livegen_budget{name=...}``), and every refusal or close a count
(``livegen_refused{code=...}``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from livegen.logs import log_event
from livegen.protocol import errors as wire_errors
from livegen.runtime.closes import CLOSE_NOT_READING as CLOSE_NOT_READING
from livegen.runtime.closes import NOT_READING_REASON as NOT_READING_REASON
from livegen.server.http.bodies import protocol_class
from livegen.server.http.origins import send_denial
from livegen.tasks import TaskSet

if TYPE_CHECKING:
    from livegen.server.config import ServerConfig
    from livegen.server.metrics import Metrics

logger = logging.getLogger("livegen.server")

#: Close code of a socket that sent nothing within ``--first-message-timeout`` of its handshake.
CLOSE_FIRST_MESSAGE_TIMEOUT = 4003
#: Connections that must have ended since the peak before memory is handed back to the system.
TRIM_AFTER = 64
#: Under steady churn (the count never falls), trim after this many connections ended.
TRIM_EVERY = 1000


def _malloc_trim() -> None:
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to do
        ctypes.CDLL("libc.so.6").malloc_trim(0)


#: glibc's ``mallopt`` parameter for the most arenas (malloc.h).
M_ARENA_MAX = -8


def limit_malloc_arenas() -> int | None:
    """Cap glibc's malloc arenas at the cores; the number set, or None (not glibc, or the user set
    ``MALLOC_ARENA_MAX``, which glibc reads itself). Call before threads start: arenas are per thread."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return None
    arenas = max(2, os.cpu_count() or 2)
    try:
        is_set = ctypes.CDLL("libc.so.6").mallopt(M_ARENA_MAX, arenas) == 1
    except (OSError, AttributeError):
        return None
    return arenas if is_set else None


def export_budgets(config: ServerConfig, metrics: Metrics) -> None:
    """Publish the configured limits as gauges, so a dashboard can set usage against them."""
    limits = {
        "max_connections": config.max_connections,
        "max_unsent_bytes": config.max_unsent_bytes,
        "first_message_timeout_seconds": config.first_message_timeout_s,
        "keep_alive_timeout_seconds": config.keep_alive_timeout_s,
        "max_header_bytes": config.max_header_bytes,
        "header_timeout_seconds": config.header_timeout_s,
        "max_body_bytes": config.max_body_bytes,
        "body_timeout_seconds": config.body_timeout_s,
        "max_client_secret_bytes": config.max_client_secret_bytes,
        "max_sessions": config.max_sessions,
    }
    for name, value in limits.items():
        metrics.budget.labels(name=name).set(value)


def uvicorn_options(config: ServerConfig) -> dict[str, object]:
    """uvicorn's own limits, from the config (``livegen serve`` and ``ServerThread`` alike), and its
    HTTP protocol: httptools' with the head limits of ``server/http/bodies.py`` (uvicorn's own head limit
    is h11's, which does not serve when httptools is installed)."""
    return {
        "http": protocol_class(config),
        "ws_max_size": 16 * 1024 * 1024,
        "timeout_keep_alive": config.keep_alive_timeout_s,
        # Clients such as the openai Node SDK always dial wss://: the server terminates TLS itself.
        "ssl_certfile": config.ssl_certfile,
        "ssl_keyfile": config.ssl_keyfile,
    }


class ConnectionBudgetMiddleware:
    def __init__(self, app: ASGIApp, config: ServerConfig, metrics: Metrics, tasks: TaskSet) -> None:
        self.app = app
        self.max_connections = config.max_connections
        self.first_message_timeout_s = config.first_message_timeout_s
        self.metrics = metrics
        self.num_open = 0
        self._peak = 0
        self._num_ended = 0  # since the last trim
        self._trimming: asyncio.Task[None] | None = None
        #: The app's task set (``server/app.py``): the lifespan cancels and awaits a trim in flight.
        self._tasks = tasks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        if self.num_open >= self.max_connections:
            await self._refuse(scope, receive, send)
            return
        self.num_open += 1
        self._peak = max(self._peak, self.num_open)
        self.metrics.connections_open.set(self.num_open)
        try:
            if self.first_message_timeout_s > 0 and not _is_spectator(scope):
                guard = _FirstMessageDeadline(receive, send, self.first_message_timeout_s, self.metrics)
                await self.app(scope, guard.receive, guard.send)
            else:
                await self.app(scope, receive, send)
        finally:
            self.num_open -= 1
            self.metrics.connections_open.set(self.num_open)
            self._maybe_trim()

    def _maybe_trim(self) -> None:
        """Off the hot path: only after a mass of sessions ended, in a thread, one at a time."""
        self._num_ended += 1
        is_mass_end = self._peak - self.num_open >= TRIM_AFTER and self.num_open <= self._peak // 4
        if not is_mass_end and self._num_ended < TRIM_EVERY:
            return
        if self._trimming is None or self._trimming.done():
            self._peak, self._num_ended = self.num_open, 0
            self._trimming = self._tasks.spawn(asyncio.to_thread(_malloc_trim))

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = wire_errors.TOO_MANY_CONNECTIONS
        self.metrics.refused.labels(code=refusal.code).inc()
        log_event(logger, "ws.refused", logging.WARNING, code=refusal.code, path=scope["path"])
        body = json.dumps(refusal.http_body(limit=self.max_connections)).encode()
        await send_denial(scope, receive, send, 503, body)


def _is_spectator(scope: Scope) -> bool:
    """A world spectator (``/v1/worlds?spectate=ID``) only watches, and a joining player
    (``?join=ID``) is told the session first: neither has to speak first."""
    query = scope.get("query_string", b"")
    return scope["path"] == "/v1/worlds" and any(
        p.startswith((b"spectate=", b"join=")) for p in query.split(b"&")
    )


class _FirstMessageDeadline:
    """Wraps one socket's ASGI channels: the first message after the handshake has a deadline."""

    def __init__(self, receive: Receive, send: Send, timeout_s: float, metrics: Metrics) -> None:
        self._receive = receive
        self._send = send
        self._timeout_s = timeout_s
        self._metrics = metrics
        self._accepted_at: float | None = None
        self._is_waiting = True  # until the first message after the handshake
        self._has_expired = False

    async def send(self, message: Message) -> None:
        if message["type"] == "websocket.accept":
            self._accepted_at = asyncio.get_running_loop().time()
        await self._send(message)

    async def receive(self) -> Message:
        if self._has_expired:
            return {"type": "websocket.disconnect", "code": 1000}
        if self._accepted_at is None or not self._is_waiting:
            return await self._receive()
        left = self._accepted_at + self._timeout_s - asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(max(left, 0.0)):
                message = await self._receive()
        except TimeoutError:
            return await self._expire()
        self._is_waiting = False
        return message

    async def _expire(self) -> Message:
        self._has_expired = True
        code = "first_message_timeout"
        self._metrics.refused.labels(code=code).inc()
        log_event(logger, "ws.first_message_timeout", logging.WARNING, timeout_s=self._timeout_s)
        reason = f"no message within {self._timeout_s:g} s of connecting"
        with contextlib.suppress(Exception):  # the socket may be gone or blocked: it ends either way
            close = {"type": "websocket.close", "code": CLOSE_FIRST_MESSAGE_TIMEOUT, "reason": reason}
            async with asyncio.timeout(5.0):
                await self._send(close)
        return {"type": "websocket.disconnect", "code": 1000}
