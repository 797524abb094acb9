"""``/v1/realtime/translations``: translation sessions' WebSocket and their key-minting route.

The SDK opens a translation session with ``client.realtime.translations.connect``
(``?model=``) and mints a browser's key with
``client.realtime.translations.client_secrets.create`` (``POST
/v1/realtime/translations/client_secrets``). Both are refused, with
``NO_LANGUAGE_MODEL`` (``protocol/errors.py``), on a server without
``--llm-base-url``: translating is the language model's work.

A translation session is an ordinary voice session of the engine (admission,
limits and models as ``/v1/realtime``'s) whose link, ``TranslationLink``, passes
everything through the translation dialect (``voice/translation.py``). It is
not resumable: ``session.close``, or losing the socket, ends it.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from livegen.errors import RemoteProtocolError
from livegen.protocol import errors as wire_errors
from livegen.runtime.voice.lifecycle import Handoff, Opening
from livegen.runtime.voice.translation import minted_session, translation_link
from livegen.server.http.auth import presented_key, select_subprotocol
from livegen.server.http.client_secrets import _json_body, _status, _ttl, error_response
from livegen.server.realtime.host import VoiceHost, WebSocketLink, new_session_id


class TranslationService:
    """The translation routes, on the voice service's engine and key store."""

    def __init__(self, voice: VoiceHost) -> None:
        self.voice = voice

    @property
    def has_language_model(self) -> bool:
        return bool(self.voice.state.config.llm_base_url)

    def routes(self) -> list[BaseRoute]:
        return [
            WebSocketRoute("/v1/realtime/translations", self.endpoint),
            Route("/v1/realtime/translations/client_secrets", self.client_secrets, methods=["POST"]),
        ]

    async def endpoint(self, websocket: WebSocket) -> None:
        await websocket.accept(subprotocol=select_subprotocol(websocket.scope))
        engine = self.voice.engine
        plain = WebSocketLink(websocket)
        requested = websocket.query_params.get("model") or engine.default_model
        secret = self.voice.client_secrets.lookup(presented_key(websocket.scope))
        try:
            if not self.has_language_model:
                raise wire_errors.NO_LANGUAGE_MODEL.error()
            session_id = new_session_id(self.voice.state)
            link = translation_link(plain, session_id, requested, secret.session if secret else None)
            name, model = await engine.admit(requested)
        except RemoteProtocolError as error:
            await engine.refuse(plain, error, 1008)
            return
        opening = Opening(Handoff(link), session_id, name, model)
        engine.open(opening)
        await opening.handoff.released.wait()

    async def client_secrets(self, request: Request) -> Response:
        try:
            body, size = await _json_body(request)
            if not self.has_language_model:
                raise wire_errors.NO_LANGUAGE_MODEL.error()
            value, expires_at, session = self._mint(body, size)
        except RemoteProtocolError as error:
            return error_response(error, _status(error))
        return JSONResponse({"value": value, "expires_at": expires_at, "session": session})

    def _mint(self, body: dict[str, Any], size: int) -> tuple[str, int, dict[str, Any]]:
        session = body.get("session")
        if not isinstance(session, dict):
            raise wire_errors.MISSING_REQUIRED_PARAMETER.error(name="session", param="session")
        model = session.get("model")
        if not isinstance(model, str) or not model:
            raise wire_errors.MISSING_REQUIRED_PARAMETER.error(name="session.model", param="session.model")
        ttl = _ttl(body)
        minted_session(session, 0)  # checked before a key is made
        bound = {"type": "translation", "model": model, "audio": session.get("audio") or {}}
        value, secret = self.voice.client_secrets.mint(bound, ttl, size)
        return value, int(secret.expires_at), minted_session(session, int(secret.expires_at))
