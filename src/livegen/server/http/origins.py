"""Which pages and which host names may reach the server: the ``Origin`` and ``Host`` checks.

A server without a key on ``127.0.0.1`` is reachable from every web page the
user opens: a page can open WebSockets to it (browsers do not apply CORS to
WebSockets), and a page whose DNS name is rebound to ``127.0.0.1`` can read
its HTTP routes as if same-origin. Two checks close both, on every route
(HTTP and WebSocket), before anything else runs:

- ``Host``: the name the client used must be allowed (``--allowed-hosts``).
  By default: the bound host, ``localhost``, and any IP address literal. A
  rebinding attack always reaches us under the attacker's DNS name, never
  under an IP literal, so literals are safe to allow; a server reached under
  a DNS name (behind a proxy, or bound to ``0.0.0.0`` and used by name) lists
  that name. ``*`` allows any.
- ``Origin`` (sent by browsers only; a request without one passes): allowed
  when it is the server's own origin (the origin's host and port equal the
  ``Host`` header, which the first check vouches for), or listed in
  ``--allowed-origins`` (exact ``scheme://host[:port]``, or ``*``). The
  default without an API key is loopback origins only (``localhost``,
  ``127.0.0.1``, ``[::1]``, any port): local pages, not the web. With a key
  the default is any origin: the key is the guard, and a browser app that
  holds it may live anywhere.

A refusal is HTTP 403 with a JSON error body (for a WebSocket, a refused
handshake) and one log line.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from livegen.logs import log_event
from livegen.protocol import errors as wire_errors
from livegen.protocol.errors import WireError

logger = logging.getLogger("livegen.server")

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::"})


def parse_list(value: str | None) -> tuple[str, ...] | None:
    """A comma list from the command line (``None`` or empty: the default policy)."""
    if value is None:
        return None
    items = tuple(item.strip() for item in value.split(",") if item.strip())
    return items or None


def host_name(authority: str) -> str:
    """The lower-cased name of ``host[:port]`` (``[v6]:port`` too), without the port."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        return authority[1 : authority.find("]")] if "]" in authority else authority[1:]
    if authority.count(":") == 1:
        return authority.rsplit(":", 1)[0]
    return authority  # a bare name, or a bare IPv6 address


def _is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _normalize_origin(origin: str) -> str:
    parts = urlsplit(origin.strip().lower())
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else origin.strip().lower()


@dataclass(frozen=True)
class OriginPolicy:
    #: Allowed host names; None allows any.
    hosts: frozenset[str] | None
    #: True: names that are IP literals pass too (the default policy).
    allow_ip_hosts: bool
    #: Allowed origins (normalized); None allows any.
    origins: frozenset[str] | None
    #: True: every loopback origin passes (the default without a key).
    allow_loopback_origins: bool

    @classmethod
    def build(
        cls,
        bind_host: str,
        api_key: str | None,
        allowed_hosts: Iterable[str] | None,
        allowed_origins: Iterable[str] | None,
    ) -> OriginPolicy:
        if allowed_hosts is None:
            bound = host_name(bind_host) if bind_host not in WILDCARD_BINDS else "localhost"
            hosts: frozenset[str] | None = frozenset({"localhost", bound})
            allow_ip = True
        else:
            names = {host_name(h) for h in allowed_hosts}
            hosts, allow_ip = (None if "*" in names else frozenset(names)), False
        if allowed_origins is None:
            origins: frozenset[str] | None = None if api_key is not None else frozenset()
            allow_loopback = api_key is None
        else:
            listed = {_normalize_origin(o) for o in allowed_origins}
            origins, allow_loopback = (None if "*" in listed else frozenset(listed)), False
        return cls(hosts, allow_ip, origins, allow_loopback)

    def is_host_allowed(self, host: str | None) -> bool:
        if self.hosts is None:
            return True
        if not host:
            return False
        name = host_name(host)
        return name in self.hosts or (self.allow_ip_hosts and _is_ip_literal(name))

    def is_origin_allowed(self, origin: str | None, host: str | None) -> bool:
        if origin is None or self.origins is None:
            return True
        parts = urlsplit(origin.strip().lower())
        if host and parts.netloc and parts.netloc == host.strip().lower():
            return True  # the server's own page
        if self.allow_loopback_origins and parts.hostname in LOOPBACK_NAMES:
            return True
        return _normalize_origin(origin) in self.origins


class OriginMiddleware:
    """Refuses (403) requests whose ``Host`` or ``Origin`` the policy does not allow."""

    def __init__(self, app: ASGIApp, policy: OriginPolicy, on_refused: Callable[[str], None]) -> None:
        self.app = app
        self.policy = policy
        self.on_refused = on_refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host, origin = headers.get("host"), headers.get("origin")
        if not self.policy.is_host_allowed(host):
            await self._refuse(scope, receive, send, wire_errors.HOST_NOT_ALLOWED, host=repr(host))
        elif not self.policy.is_origin_allowed(origin, host):
            await self._refuse(scope, receive, send, wire_errors.ORIGIN_NOT_ALLOWED, origin=repr(origin))
        else:
            await self.app(scope, receive, send)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, refusal: WireError, **fields: str
    ) -> None:
        self.on_refused(refusal.code)
        message = refusal.text(**fields)
        log_event(
            logger, "http.refused", logging.WARNING, code=refusal.code, path=scope["path"], reason=message
        )
        body = json.dumps(refusal.http_body(**fields)).encode()
        await send_denial(scope, receive, send, 403, body)


async def send_denial(scope: Scope, receive: Receive, send: Send, status: int, body: bytes) -> None:
    """An HTTP error response, or for a WebSocket a refused handshake with that response."""
    headers = [(b"content-type", b"application/json")]
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    await receive()  # websocket.connect
    await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
    await send({"type": "websocket.http.response.body", "body": body})
