"""Ephemeral client keys: ``POST /v1/realtime/client_secrets`` (GA) and ``/v1/realtime/sessions`` (beta).

A browser must never hold the server's API key. The page's backend (or the
operator) mints a short-lived ``ek_...`` key with the server's key, bound to
the session configuration it was made with, and hands only that to the page.
As OpenAI does, a key opens any number of sessions until it expires
(``expires_after.seconds``, 10 to 7200, default 600); a session opened with it
goes on after the key expires. It is accepted where a browser can present it:
WebRTC calls (``Authorization: Bearer``) and the WebSocket (Bearer or the
``openai-insecure-api-key.`` subprotocol), never for minting more keys. An
``ek_`` key that is unknown or expired is refused even when the server has no
API key, so an expired key never silently works.

Keys live in this server's memory only (a restart forgets them; a server of
many processes shares them through its coordinator) and are never logged:
only their count is. Expired keys are dropped when keys are minted or checked.
At most ``MAX_KEYS`` keys, holding at most ``--max-client-secret-mib`` of
session configuration together, are live at once; a mint past either is
refused (429) until keys expire. A live key is never dropped to make room, so a
flood of mints cannot log other users out.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from livegen.errors import CapacityExceeded, RemoteProtocolError
from livegen.protocol import errors as wire_errors
from livegen.protocol import realtime as wire
from livegen.protocol.errors import WireError
from livegen.runtime.voice.engine import configured_session
from livegen.server.http.bodies import json_object

PREFIX = "ek_"
DEFAULT_TTL_S = 600
MIN_TTL_S, MAX_TTL_S = 10, 7200
#: Keys held at once; minting past it is refused (a flood cannot grow memory nor evict live keys).
MAX_KEYS = 10_000
TOO_MANY_KEYS = WireError(
    "rate_limit_exceeded",
    "live ephemeral keys are at their limit ({detail}); retry when some have expired",
    "openai code",
    "a mint past 10,000 live keys or `--max-client-secret-mib` of their sessions (429)",
    kind=CapacityExceeded,
)


@dataclass(frozen=True)
class ClientSecret:
    expires_at: float
    #: The ``session`` object it was made with (validated), applied to every session it opens.
    session: dict[str, Any]
    #: Bytes of the body it was minted from, counted against ``--max-client-secret-mib``.
    size: int = 0


class ClientSecrets:
    def __init__(self, clock: Callable[[], float] = time.time, max_bytes: int = 64 * 1024 * 1024) -> None:
        self._clock = clock
        self._keys: dict[str, ClientSecret] = {}
        self.max_bytes = max_bytes
        self.num_bytes = 0  # of all live keys' sessions, as their bodies sent them
        #: Told of every key minted (a server of many processes shares them: ``cluster/gate.py``).
        self.on_mint: Callable[[str, ClientSecret], None] | None = None

    def __len__(self) -> int:
        return len(self._keys)

    def mint(self, session: dict[str, Any], ttl_s: float, size: int = 0) -> tuple[str, ClientSecret]:
        """A new key for ``session`` (``size`` bytes of it held); refused when the store is full."""
        self._expire()
        if len(self._keys) >= MAX_KEYS:
            raise TOO_MANY_KEYS.error(detail=f"{MAX_KEYS} keys", param=None)
        if self.num_bytes + size > self.max_bytes:
            raise TOO_MANY_KEYS.error(detail=f"{self.max_bytes} bytes of sessions", param=None)
        value = PREFIX + secrets.token_urlsafe(24)
        secret = ClientSecret(self._clock() + ttl_s, session, size)
        self._keys[value] = secret
        self.num_bytes += size
        if self.on_mint is not None:
            self.on_mint(value, secret)
        return value, secret

    def adopt(self, key: str, secret: ClientSecret) -> None:
        """A key another process of this server minted (its bytes were counted there)."""
        if key.startswith(PREFIX) and secret.expires_at > self._clock():
            self._keys.setdefault(key, ClientSecret(secret.expires_at, secret.session))

    def lookup(self, key: str | None) -> ClientSecret | None:
        """The live secret for ``key``; None when it is not an ephemeral key, unknown or expired."""
        if key is None or not key.startswith(PREFIX):
            return None
        self._expire()
        return self._keys.get(key)

    def bound_update(self, key: str | None) -> wire.ClientEvent | None:
        """The ``session.update`` that gives a session opened with ``key`` its key's configuration."""
        secret = self.lookup(key)
        if secret is None or not secret.session:
            return None
        return wire.session_update(secret.session)

    def _expire(self) -> None:
        now = self._clock()
        for key in [k for k, s in self._keys.items() if s.expires_at <= now]:
            self.num_bytes -= self._keys.pop(key).size


def error_response(error: RemoteProtocolError, status: int) -> Response:
    """An HTTP error in OpenAI's shape: ``{"error": {type, code, message, param}}``."""
    return JSONResponse({"error": error.to_error_body()}, status_code=status)


def _ttl(body: dict[str, Any]) -> float:
    expires_after = body.get("expires_after") or {}
    if not isinstance(expires_after, dict):
        raise wire_errors.INVALID_VALUE.error(detail="expires_after must be an object", param="expires_after")
    if expires_after.get("anchor", "created_at") != "created_at":
        detail = "expires_after.anchor must be 'created_at'"
        raise wire_errors.INVALID_VALUE.error(detail=detail, param="expires_after.anchor")
    seconds = expires_after.get("seconds", DEFAULT_TTL_S)
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not MIN_TTL_S <= seconds <= MAX_TTL_S:
        detail = f"expires_after.seconds must be an integer from {MIN_TTL_S} to {MAX_TTL_S}"
        raise wire_errors.INVALID_VALUE.error(detail=detail, param="expires_after.seconds")
    return float(seconds)


def validated_session(session: object, model: str) -> dict[str, Any]:
    """``session`` checked as a ``session.update`` would be (OpenAI's errors); raises if invalid."""
    configured_session(session, model, "sess_check")
    assert isinstance(session, dict)
    return session


async def _json_body(request: Request) -> tuple[dict[str, Any], int]:
    """The body as a JSON object, and its size (read under ``server/http/bodies.py``'s limits)."""
    raw = await request.body()
    return json_object(raw), len(raw)


def _status(error: RemoteProtocolError) -> int:
    return 429 if isinstance(error, CapacityExceeded) else 400


def routes_for(store: ClientSecrets, default_model: Callable[[], str]) -> list[Any]:
    """The GA and beta minting routes over ``store``."""
    from starlette.routing import Route

    async def mint(
        body: dict[str, Any], session: object, size: int
    ) -> tuple[str, ClientSecret, dict[str, Any]]:
        ttl = _ttl(body)
        checked = session if session is not None else {}
        shown = configured_session(checked, default_model(), "sess_ephemeral")
        assert isinstance(checked, dict)
        value, secret = store.mint(checked, ttl, size)
        shown.pop("id", None)
        return value, secret, shown

    async def client_secrets(request: Request) -> Response:
        try:
            body, size = await _json_body(request)
            value, secret, shown = await mint(body, body.get("session"), size)
        except RemoteProtocolError as error:
            return error_response(error, _status(error))
        return JSONResponse({"value": value, "expires_at": int(secret.expires_at), "session": shown})

    async def beta_sessions(request: Request) -> Response:
        try:
            body, size = await _json_body(request)
            config = {k: v for k, v in body.items() if k != "expires_after"}
            value, secret, shown = await mint(body, config, size)
        except RemoteProtocolError as error:
            return error_response(error, _status(error))
        client_secret = {"value": value, "expires_at": int(secret.expires_at)}
        return JSONResponse({**shown, "object": "realtime.session", "client_secret": client_secret})

    return [
        Route("/v1/realtime/client_secrets", client_secrets, methods=["POST"]),
        Route("/v1/realtime/sessions", beta_sessions, methods=["POST"]),
    ]
