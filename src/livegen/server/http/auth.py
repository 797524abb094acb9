"""API-key checks for HTTP routes and WebSockets, and subprotocol selection.

One pure ASGI middleware guards every route but ``/health`` (so a load
balancer can probe without a key). WebSocket clients may send the key as an
``Authorization: Bearer`` header or, from a browser that cannot set headers,
as the ``openai-insecure-api-key.<key>`` subprotocol that OpenAI's browser
clients use. A refused WebSocket gets an HTTP 401 denial response, not an
accepted socket that closes at once.

Ephemeral client keys (``ek_...``, ``server/http/client_secrets.py``) open sessions
only: the WebSocket and WebRTC calls, voice and world (``EPHEMERAL_PATHS``), never other routes
or the minting of more keys. An ``ek_`` key there must be live even when the
server has no API key of its own, so an expired one is refused, not ignored.
"""

from __future__ import annotations

import hmac
import json
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Receive, Scope, Send

if TYPE_CHECKING:
    from livegen.server.http.client_secrets import ClientSecrets

KEY_SUBPROTOCOL_PREFIX = "openai-insecure-api-key."
#: Open without a key: the load balancer's probe, and the page, which then asks for the key itself.
OPEN_PATHS = frozenset({"/health", "/"})
OPEN_PREFIXES = ("/static/",)
#: Where an ephemeral key stands in for the server's: opening voice sessions, and hanging up calls.
EPHEMERAL_PATHS = frozenset(
    {"/v1/realtime", "/v1/realtime/translations", "/v1/realtime/calls", "/v1/worlds/calls"}
) | {"/v1/live/sessions"}  # GPT-Live (server/realtime/live.py)
EPHEMERAL_HANGUP = (("/v1/realtime/calls/", "/v1/worlds/calls/", "/v1/live/sessions/"), "/hangup")
EPHEMERAL_PREFIX = "ek_"
#: Where translation sessions open (``server/realtime/translation.py``): only translation keys open them.
TRANSLATION_PATH = "/v1/realtime/translations"


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
    def __init__(
        self, app: ASGIApp, api_key: str | None, client_secrets: ClientSecrets | None = None
    ) -> None:
        self.app = app
        self.api_key = api_key
        self.client_secrets = client_secrets

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        verdict = self._verdict(scope)
        if verdict is None:
            await self.app(scope, receive, send)
            return
        body = json.dumps(
            {
                "error": {
                    "type": "authentication_error",
                    "code": "invalid_api_key",
                    "message": verdict,
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

    def _verdict(self, scope: Scope) -> str | None:
        """None to let the request in, else why it is refused (never the key itself)."""
        if scope["type"] not in ("http", "websocket"):
            return None
        path = scope["path"]
        key = presented_key(scope)
        is_hangup = path.startswith(EPHEMERAL_HANGUP[0]) and path.endswith(EPHEMERAL_HANGUP[1])
        if scope.get("method") == "OPTIONS" and (path in EPHEMERAL_PATHS or is_hangup):
            return None  # a CORS preflight carries no credentials; the call itself will
        if self._is_server_key(key):
            return None  # the server's key, first: it may itself start with "ek_"
        if key is not None and key.startswith(EPHEMERAL_PREFIX) and (path in EPHEMERAL_PATHS or is_hangup):
            secret = self.client_secrets.lookup(key) if self.client_secrets is not None else None
            if secret is not None:
                # A key opens the kind of session it was minted for: translation keys only translate.
                minted_for = "translation" if secret.session.get("type") == "translation" else "realtime"
                if (minted_for == "translation") == (path == TRANSLATION_PATH):
                    return None
                return f"this ephemeral key was minted for {minted_for} sessions only"
            return (
                "the ephemeral key is unknown or has expired: mint a new one at /v1/realtime/client_secrets"
            )
        if self.api_key is None or path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            return None
        return "missing or wrong API key: send 'Authorization: Bearer <key>'"

    def _is_server_key(self, key: str | None) -> bool:
        if key is None or self.api_key is None:
            return False
        return hmac.compare_digest(key.encode(), self.api_key.encode())
