"""HTTP requests as they arrive: how large and how slow a head and a body may be, and how bodies parse.

Every HTTP route is behind these limits; none reads or parses a body on its own.

- Heads (``HeadLimitProtocol``, uvicorn's httptools protocol, the parser that
  serves): a head over ``max_header_bytes`` is answered 431 as soon as that
  much of it has arrived, complete or not; a head not complete within
  ``header_timeout_s`` of connecting (or of its first byte on a kept-alive
  connection) is answered 408 and closed, and a connection that sent nothing
  is closed. HTTP connections not upgraded to WebSockets number at most
  ``max_connections`` (WebSockets have their own count, ``server/http/budgets.py``):
  one more closes the one that has waited longest for a head (slow, silent or
  idle), or is answered 503 when every one is mid-request. A refused connection is half-closed and drained for
  a moment before it is closed, so that the client reads its answer rather
  than a reset; a request still being answered on it (garbage pipelined after a
  404) answers no more, so nothing is written after the half-close.
- Bodies (``BodyLimitMiddleware``, outermost): a body over ``max_body_bytes``
  (``max_audio_bytes`` for audio uploads, see ``BodyLimits``) is answered 413,
  at once when its ``Content-Length`` says so, else when that much has been
  read; a body not in full within ``body_timeout_s`` of its head is answered
  408. A client that leaves mid-body ends its request with one info line, not
  a traceback. An answer sent before its request's body was read to the end
  closes the connection, so no unread body is drained.
- Parsing: ``json_object`` (deep nesting is invalid JSON, never a 500) and
  ``multipart_fields`` (a few named fields, split in C, never email's parser).

Every refusal is JSON in OpenAI's error shape, ``{"error": {message, type, code, param}}``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any

import httptools
import msgspec
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from livegen.errors import CapacityExceeded
from livegen.logs import log_event
from livegen.protocol import errors as wire_errors
from livegen.protocol.errors import WireError
from livegen.server.config import ServerConfig

logger = logging.getLogger("livegen.server")

REQUEST_TOO_LARGE = WireError(
    "request_too_large", "the request body is over {limit} bytes", "livegen", "over `--max-body-bytes` (413)"
)
HEAD_TOO_LARGE = WireError(
    "request_header_fields_too_large",
    "the request line and headers are over {limit} bytes",
    "livegen",
    "over `--max-header-bytes` (431)",
)
REQUEST_TIMEOUT = WireError(
    "request_timeout",
    "the request {part} did not arrive within {timeout:g} s",
    "livegen",
    "a head or body slower than `--header-timeout` or `--body-timeout` (408)",
)
TOO_MANY_CONNECTIONS = WireError(
    "too_many_connections",
    "the server holds {limit} connections; retry later",
    "livegen",
    "over `--max-connections` (503)",
    error_type="server_error",
    kind=CapacityExceeded,
)
TOO_MANY_PARTS = WireError(
    "invalid_value", "the multipart body has more than {limit} parts", "openai code", "a multipart flood"
)
#: Parts a multipart body may have; a call offer has two (``sdp``, ``session``).
MAX_PARTS = 8
#: Seconds a refused connection is drained after its answer, before it is closed.
LINGER_S = 2.0


def error_json(row: WireError, param: str | None = None, **fields: Any) -> bytes:
    body = {"type": row.error_type, "code": row.code, "message": row.text(**fields), "param": param}
    return json.dumps({"error": body}).encode()


# --- parsing ------------------------------------------------------------------------------


def json_object(raw: bytes, param: str | None = None) -> dict[str, Any]:
    """``raw`` as a JSON object (empty: ``{}``); malformed or too deeply nested JSON is ``invalid_json``."""
    try:
        value = msgspec.json.decode(raw) if raw.strip() else {}
    except msgspec.DecodeError as exc:
        raise wire_errors.INVALID_JSON.error(detail=exc, param=param) from None
    except RecursionError:
        raise wire_errors.INVALID_JSON.error(detail="it is nested too deeply", param=param) from None
    if not isinstance(value, dict):
        what = f"{param} must be an object" if param else "the body must be a JSON object"
        raise wire_errors.INVALID_VALUE.error(detail=what, param=param)
    return value


_BOUNDARY = re.compile(r';\s*boundary=(?:"([^"]+)"|([^;\s]+))', re.IGNORECASE)
_NAME = re.compile(rb';\s*name=(?:"([^"]*)"|([^;\s]+))', re.IGNORECASE)


def multipart_fields(body: bytes, content_type: str, max_parts: int = MAX_PARTS) -> dict[str, bytes]:
    """The named fields of a ``multipart/form-data`` body; more than ``max_parts`` parts is refused.

    ``bytes.split`` with a bounded count does the work, so a body of thousands of
    parts costs no more than one of a few."""
    found = _BOUNDARY.search(content_type)
    if found is None:
        detail = "the multipart body has no boundary in its Content-Type"
        raise wire_errors.INVALID_VALUE.error(detail=detail, param=None)
    delimiter = b"--" + (found.group(1) or found.group(2)).encode("latin-1")
    # The preamble, up to max_parts parts, and what follows the last delimiter: its closing "--".
    sections = body.split(delimiter, max_parts + 1)[1:]
    if sections and not sections[-1].startswith(b"--"):
        if len(sections) > max_parts:
            raise TOO_MANY_PARTS.error(limit=max_parts, param=None)
        raise wire_errors.INVALID_VALUE.error(detail="the multipart body is not terminated", param=None)
    fields: dict[str, bytes] = {}
    for section in sections[:-1]:
        head, _, content = section.partition(b"\r\n\r\n")
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-disposition:") and (name := _NAME.search(line)):
                key = (name.group(1) if name.group(1) is not None else name.group(2)).decode("latin-1")
                fields[key] = content[:-2] if content.endswith(b"\r\n") else content
    return fields


# --- bodies ---------------------------------------------------------------------------------


#: An upload may take the time a slow link (1 Mbit/s) needs for its largest size, never less
#: than ``body_timeout_s``: a 25 MiB audio file cannot arrive in the 30 s a call offer gets.
SLOW_LINK_BYTES_PER_S = 128 * 1024
#: Largest JSON body of a ``/v1/audio/speech`` request: 4096 characters, escaped, and the other fields.
MAX_SPEECH_BODY_BYTES = 64 * 1024


@dataclass(frozen=True)
class BodyLimits:
    """How large and how slow a body may be: one limit for every route, and the routes that take uploads."""

    max_bytes: int
    timeout_s: float
    #: path -> (bytes, seconds), for the routes whose bodies are larger or smaller than the rest.
    uploads: dict[str, tuple[int, float]] = field(default_factory=dict)

    @classmethod
    def of(cls, config: ServerConfig) -> BodyLimits:
        audio = config.max_audio_bytes
        audio_s = max(config.body_timeout_s, audio / SLOW_LINK_BYTES_PER_S)
        uploads = {
            "/v1/audio/transcriptions": (audio, audio_s),
            "/v1/audio/speech": (MAX_SPEECH_BODY_BYTES, config.body_timeout_s),
        }
        return cls(config.max_body_bytes, config.body_timeout_s, uploads)

    def for_path(self, path: str) -> tuple[int, float]:
        return self.uploads.get(path, (self.max_bytes, self.timeout_s))


class BodyRefused(Exception):
    """Raised out of ``receive`` into the app; the middleware answers it (413 or 408), so a route
    that answers every other exception itself must let this one pass."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(status)
        self.status = status
        self.body = body


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def _has_body(scope: Scope) -> bool:
    """Whether a body follows the head (HTTP/1.1: a Content-Length over 0, or a Transfer-Encoding)."""
    names = {name for name, _ in scope.get("headers", [])}
    return b"transfer-encoding" in names or bool(_content_length(scope))


class BodyLimitMiddleware:
    """Every HTTP request's body: at most its route's bytes, in full within its route's seconds."""

    def __init__(self, app: ASGIApp, limits: BodyLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        max_bytes, timeout_s = self.limits.for_path(scope["path"])
        body = _Body(max_bytes, timeout_s, receive, send, is_read=not _has_body(scope))
        declared = _content_length(scope)
        try:
            if declared is not None and declared > max_bytes:
                raise body.too_large()
            await self.app(scope, body.receive, body.send)
        except BodyRefused as refused:
            if not body.has_answered:
                log_event(logger, "http.refused", logging.WARNING, status=refused.status, path=scope["path"])
                headers = [
                    (b"content-type", b"application/json"),
                    (b"content-length", b"%d" % len(refused.body)),
                    (b"connection", b"close"),
                ]
                await send({"type": "http.response.start", "status": refused.status, "headers": headers})
                await send({"type": "http.response.body", "body": refused.body})
        except ClientDisconnect:  # the client left mid-body: nobody to answer, nothing to report
            log_event(logger, "http.client_left", path=scope["path"])


class _Body:
    """One request's channels: its body counted and timed, its answer closing an unread body."""

    def __init__(self, max_bytes: int, timeout_s: float, receive: Receive, send: Send, is_read: bool) -> None:
        self._max_bytes = max_bytes
        self._timeout_s = timeout_s
        self._receive = receive
        self._send = send
        self._deadline = asyncio.get_running_loop().time() + timeout_s
        self._num_read = 0
        self._is_read = is_read
        self.has_answered = False

    def too_large(self) -> BodyRefused:
        return BodyRefused(413, error_json(REQUEST_TOO_LARGE, limit=self._max_bytes))

    async def receive(self) -> Message:
        if self._is_read:
            return await self._receive()  # after the body: only a disconnect, whenever it comes
        try:
            async with asyncio.timeout(max(self._deadline - asyncio.get_running_loop().time(), 0.0)):
                message = await self._receive()
        except TimeoutError:
            raise BodyRefused(
                408, error_json(REQUEST_TIMEOUT, part="body", timeout=self._timeout_s)
            ) from None
        if message["type"] == "http.request":
            self._num_read += len(message.get("body", b""))
            if self._num_read > self._max_bytes:
                raise self.too_large()
            self._is_read = not message.get("more_body", False)
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.has_answered = True
            if not self._is_read:  # the rest of the body is never read: end the connection with this answer
                message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
        await self._send(message)


# --- heads ----------------------------------------------------------------------------------


class _HeadRefused(Exception):
    """Raised in a parser callback to stop parsing a connection that has been answered."""


#: Orders connections by when they began to wait (the loop's clock may tick once per iteration).
_EVENTS = itertools.count()


class HeadLimitProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with livegen's head limits, deadline and connection count.

    ``protocol_class`` makes a subclass that carries the limits, since uvicorn
    builds protocols itself, from its own config only."""

    max_header_bytes = ServerConfig.max_header_bytes
    header_timeout_s = ServerConfig.header_timeout_s
    max_connections = ServerConfig.max_connections
    body_limits = BodyLimits.of(ServerConfig())

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # between requests, or inside a head
        self._head_bytes = 0  # of the head in progress, counted as it arrives
        #: A message began or ended inside the chunk being parsed: its bytes are not all the head's.
        self._is_mixed_chunk = False
        self._has_data = False
        #: When it began to wait for a head (connected, or its last request received), as an order.
        self._waiting_since = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._is_refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        others = [
            c for c in self.connections if isinstance(c, HeadLimitProtocol) and not c.transport.is_closing()
        ]
        super().connection_made(transport)
        self._waiting_since = next(_EVENTS)
        if len(others) >= self.max_connections and not self._make_room(others):
            self._refuse(503, error_json(TOO_MANY_CONNECTIONS, limit=self.max_connections))
            return
        self._arm_head_timer()

    def _make_room(self, others: list[HeadLimitProtocol]) -> bool:
        """Close the connection that has waited longest for a head (refused ones first): a slow or
        idle one loses nothing, and a new client is served rather than refused. False: none waits."""
        waiting = [c for c in others if c._is_refused or c._is_waiting()]
        if not waiting:
            return False
        min(waiting, key=lambda c: (not c._is_refused, c._waiting_since)).transport.close()
        return True

    def _is_waiting(self) -> bool:
        """Between requests or inside a head, with no request of its own in progress."""
        return self._in_head and (self.cycle is None or self.cycle.response_complete)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._is_refused:
            return  # answered: what else comes is drained until the connection closes
        self._unset_keepalive_if_required()
        if self._in_head and self._head_timer is None:
            self._arm_head_timer()  # the first byte of a head on a kept-alive connection
        self._has_data, self._is_mixed_chunk = True, False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self._disarm_head_timer()
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError:
            if not self._is_refused:
                self._refuse(400, error_json(wire_errors.INVALID_VALUE, detail="invalid HTTP request"))
            return
        # Counted a chunk late where a head starts mid-chunk (at most one read, 256 KiB, more);
        # a complete head is measured exactly when it completes.
        if self._in_head and not self._is_mixed_chunk:
            self._head_bytes += len(data)
            if self._head_bytes > self.max_header_bytes:
                self._refuse(431, error_json(HEAD_TOO_LARGE, limit=self.max_header_bytes))

    def on_message_begin(self) -> None:
        self._in_head, self._head_bytes, self._is_mixed_chunk = True, 0, True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm_head_timer()
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self.max_header_bytes:
            self._refuse(431, error_json(HEAD_TOO_LARGE, limit=self.max_header_bytes))
            raise _HeadRefused
        declared = _content_length({"headers": self.headers})
        max_bytes, _ = self.body_limits.for_path(self.url.split(b"?", 1)[0].decode("latin-1"))
        if declared is not None and declared > max_bytes:  # here, so the answer can linger
            self._refuse(413, error_json(REQUEST_TOO_LARGE, limit=max_bytes))
            raise _HeadRefused
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._head_bytes, self._is_mixed_chunk = True, 0, True
        self._waiting_since = next(_EVENTS)

    def _arm_head_timer(self) -> None:
        if self.header_timeout_s > 0:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._in_head or self._is_refused or self.transport.is_closing():
            return
        is_answering = self.cycle is not None and not self.cycle.response_complete
        if is_answering or (not self._has_data and self.cycle is None):
            self.transport.close()  # silent since connecting, or a pipelined head mid-answer
            return
        self._refuse(408, error_json(REQUEST_TIMEOUT, part="head", timeout=self.header_timeout_s))

    def _refuse(self, status: int, body: bytes) -> None:
        """Answer, half-close, and drain the connection a moment so the client reads the answer."""
        self._is_refused = True
        self._disarm_head_timer()
        log_event(logger, "http.refused", logging.WARNING, status=status)
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # A request before this one is still being answered (a 404 for a pipelined head, then
            # garbage): it answers no more (uvicorn drops a gone client's writes), rather than
            # writing after the half-close and logging a traceback; half-way through, not even this.
            cycle.disconnected = True
            if cycle.response_started:
                self.transport.close()
                return
        head = b"content-type: application/json\r\nconnection: close\r\ncontent-length: %d\r\n\r\n"
        self.transport.write(STATUS_LINE[status] + head % len(body) + body)
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()


def protocol_class(config: ServerConfig) -> type[HeadLimitProtocol]:
    """``HeadLimitProtocol`` with the config's limits, for uvicorn's ``http`` option."""
    limits = {
        "max_header_bytes": config.max_header_bytes,
        "header_timeout_s": config.header_timeout_s,
        "max_connections": config.max_connections,
        "body_limits": BodyLimits.of(config),
    }
    return type("LivegenHTTPProtocol", (HeadLimitProtocol,), limits)
