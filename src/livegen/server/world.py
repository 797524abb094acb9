"""``/v1/worlds``: the WebSocket transport of world sessions.

It accepts a socket (choosing the subprotocol that carries a browser's key),
wraps it as a ``Link`` and hands it to a ``SessionOwner``
(``runtime/world/owner.py``), which reads, dispatches and answers the
session's messages through the ``WorldEngine`` (``runtime/world/engine.py``:
the model, scheduler, session manager and workers). Nothing here knows a
world event or a runner: the transport only moves text and bytes. WebRTC calls
(``/v1/worlds/calls``, ``server/world_calls.py``) are links to the same owner.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from starlette.routing import BaseRoute, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from livegen.runtime.world.engine import WorldEngine, WorldSettings
from livegen.runtime.world.owner import LinkClosed, SessionOwner
from livegen.runtime.world.spectators import SpectatorLimits
from livegen.server.auth import select_subprotocol
from livegen.server.recordings import recording_routes, recording_settings

if TYPE_CHECKING:
    from livegen.server.app import State
    from livegen.server.world_calls import WorldCallService


class WebSocketLink:
    """A client's WebSocket as the owner sees it (``runtime.world.owner.Link``)."""

    __slots__ = ("websocket",)

    def __init__(self, websocket: WebSocket) -> None:
        self.websocket = websocket

    async def send_text(self, text: str) -> None:
        try:
            await self.websocket.send_text(text)
        except WebSocketDisconnect as gone:
            raise LinkClosed(gone.code) from gone

    async def send_bytes(self, data: bytes) -> None:
        try:
            await self.websocket.send_bytes(data)
        except WebSocketDisconnect as gone:
            raise LinkClosed(gone.code) from gone

    async def receive(self) -> str | bytes | None:
        try:
            message = await self.websocket.receive()
        except WebSocketDisconnect:
            return None
        if message["type"] == "websocket.disconnect":
            return None
        text = message.get("text")
        return text if text is not None else message.get("bytes") or b""

    async def close(self, code: int = 1000, reason: str = "") -> None:
        await self.websocket.close(code=code, reason=reason)


class WorldService:
    name = "world"

    def __init__(self, state: State) -> None:
        assert state.world_model is not None
        self.state = state
        config = state.config
        #: The WebRTC transport (``server/world_calls.py``), when aiortc is installed (``webrtc`` extra).
        has_calls = importlib.util.find_spec("aiortc") is not None
        settings = WorldSettings(
            max_sessions=config.max_sessions,
            max_unsent_bytes=config.max_unsent_bytes,
            world_workers=config.world_workers,
            ray_address=config.ray_address,
            realtime_headroom=config.world_realtime_headroom,
            model_options=config.world_options(),
            recordings=recording_settings(config),
            spectators=SpectatorLimits(
                per_session=config.world_max_spectators_per_session,
                total=config.world_max_spectators,
                token_ttl_s=config.world_spectate_token_ttl_s,
                max_unsent_bytes=config.max_unsent_bytes,
            ),
            transports=("websocket", "webrtc") if has_calls else ("websocket",),
        )
        self.engine = WorldEngine(state.registry, state.world_model, settings)
        self.connections: set[SessionOwner] = set()
        self.calls: WorldCallService | None = None
        if has_calls:
            from livegen.server.world_calls import WorldCallService

            self.calls = WorldCallService(self)

    def routes(self) -> list[BaseRoute]:
        routes: list[BaseRoute] = [
            WebSocketRoute("/v1/worlds", self._endpoint),
            *recording_routes(self.engine),
        ]
        return routes + (self.calls.routes() if self.calls is not None else [])

    async def start(self) -> None:
        await self.engine.start()

    async def stop(self) -> None:
        if self.calls is not None:
            await self.calls.stop()
        for owner in list(self.connections):
            await owner.shutdown()
        await self.engine.stop()

    def health(self) -> dict[str, Any]:
        return self.engine.health()

    async def _endpoint(self, websocket: WebSocket) -> None:
        await websocket.accept(subprotocol=select_subprotocol(websocket.scope))
        spectated = websocket.query_params.get("spectate")
        if spectated is not None:  # a read-only spectator of a live session (runtime/world/spectators.py)
            assert self.engine.spectators is not None  # this service always sets their limits
            token = websocket.query_params.get("token", "")
            link = WebSocketLink(websocket)
            await self.engine.spectators.serve(spectated, token, link, self.engine.describe)
            return
        owner = SessionOwner(self.engine, WebSocketLink(websocket), self.state.metrics)
        self.connections.add(owner)
        try:
            await owner.run()
        finally:
            self.connections.discard(owner)
