"""API-key checks for HTTP routes and WebSockets, and subprotocol selection.

One pure ASGI middleware guards every route but ``/health`` (so a load
balancer can probe without a key). WebSocket clients may send the key as an
``Authorization: Bearer`` header or, from a browser that cannot set headers,
as the ``openai-insecure-api-key.<key>`` subprotocol that OpenAI's browser
clients use. A refused WebSocket gets an HTTP 401 denial response, not an
accepted socket that closes at once.
"""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Receive, Scope, Send

KEY_SUBPROTOCOL_PREFIX = "openai-insecure-api-key."
#: Open without a key: the load balancer's probe, and the page, which then asks for the key itself.
OPEN_PATHS = frozenset({"/health", "/"})
OPEN_PREFIXES = ("/static/",)


def offered_subprotocols(scope: Scope) -> list[str]:
    return [str(p) for p in scope.get("subprotocols", []) if p]


def select_subprotocol(scope: Scope) -> str | None:
    """The subprotocol to accept: ``realtime`` if offered, else the first that is not a key."""
    offered = [p for p in offered_subprotocols(scope) if not p.startswith(KEY_SUBPROTOCOL_PREFIX)]
    if "realtime" in offered:
        return "realtime"
    return offered[0] if offered else None


def presented_key(scope: Scope) -> str | None:
    headers: dict[str, str] = {
        k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])
    }
    authorization: str = headers.get("authorization", "")
    if authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    if scope["type"] == "websocket":
        for protocol in offered_subprotocols(scope):
            if protocol.startswith(KEY_SUBPROTOCOL_PREFIX):
                return protocol[len(KEY_SUBPROTOCOL_PREFIX) :]
    return None


class APIKeyMiddleware:
    def __init__(self, app: ASGIApp, api_key: str | None) -> None:
        self.app = app
        self.api_key = api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._is_allowed(scope):
            await self.app(scope, receive, send)
            return
        body = json.dumps(
            {
                "error": {
                    "type": "authentication_error",
                    "code": "invalid_api_key",
                    "message": "missing or wrong API key: send 'Authorization: Bearer <key>'",
                    "param": None,
                }
            }
        ).encode()
        headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        else:
            await receive()  # websocket.connect
            await send({"type": "websocket.http.response.start", "status": 401, "headers": headers})
            await send({"type": "websocket.http.response.body", "body": body})

    def _is_allowed(self, scope: Scope) -> bool:
        if self.api_key is None or scope["type"] not in ("http", "websocket"):
            return True
        if scope["path"] in OPEN_PATHS or scope["path"].startswith(OPEN_PREFIXES):
            return True
        key = presented_key(scope)
        return key is not None and hmac.compare_digest(key.encode(), self.api_key.encode())
