"""``/v1/worlds``: the WebSocket transport of world sessions.

It accepts a socket (choosing the subprotocol that carries a browser's key), wraps it
as a ``Link`` and hands it to the ``WorldEngine`` (``runtime/world/``) as a player's or
a spectator's (``?spectate=ID&token=T``) or a joining player's (``?join=ID&token=T``): it knows
no world event nor runner, it only moves text and bytes.
WebRTC calls (``/v1/worlds/calls``, ``server/webrtc/world_calls.py``) link to the same engine.
It also puts the scheduler's measured batch costs and the realtime sessions they
allow on ``/metrics`` (``CapacityCollector``), as ``/health`` shows them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.routing import BaseRoute, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from livegen.runtime.world.engine import WorldEngine, WorldSettings
from livegen.runtime.world.owner import LinkClosed
from livegen.server.http.auth import select_subprotocol
from livegen.server.world.recordings import recording_routes, recording_settings

if TYPE_CHECKING:
    from livegen.server.state import State
    from livegen.server.webrtc.world_calls import WorldCallService


@dataclasses.dataclass(slots=True)
class WebSocketLink:
    """A client's WebSocket as the owner sees it (``runtime.world.owner.Link``)."""

    websocket: WebSocket

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
        """The next message; None once the client is gone."""
        with contextlib.suppress(WebSocketDisconnect):
            message = await self.websocket.receive()
            if message["type"] != "websocket.disconnect":
                text = message.get("text")
                return text if text is not None else message.get("bytes") or b""
        return None

    async def close(self, code: int = 1000, reason: str = "") -> None:
        await self.websocket.close(code=code, reason=reason)


class CapacityCollector(Collector):
    """``/metrics``: the world steps' measured cost per batch size and what it allows (issue 39)."""

    def __init__(self, engine: WorldEngine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[GaugeMetricFamily]:
        step = GaugeMetricFamily(
            "livegen_world_step_seconds",
            "Median measured world model step, by chunk length (frames) and batch size (sessions)",
            labels=["frames", "batch"],
        )
        allowed = GaugeMetricFamily(
            "livegen_world_realtime_capacity",
            "Realtime world sessions the measured steps allow, by chunk length (frames), all of that length",
            labels=["frames"],
        )
        realtime = GaugeMetricFamily("livegen_world_realtime_sessions", "Realtime world sessions admitted")
        load = GaugeMetricFamily(
            "livegen_world_realtime_load", "Share of the busiest world worker's time realtime sessions need"
        )
        scheduler = self.engine.scheduler
        if scheduler is not None:
            for frames, sizes in scheduler.admission.costs.measured().items():
                for batch, seconds in sizes.items():
                    step.add_metric([str(frames), str(batch)], seconds)
            report = scheduler.admission.capacity()
            for length, count in cast("dict[str, int]", report["capacity"]).items():
                allowed.add_metric([length], count)
            realtime.add_metric([], scheduler.admission.num_realtime)
            load.add_metric([], scheduler.admission.realtime_load)
        yield from (step, allowed, realtime, load)


class WorldService:
    name = "world"

    def __init__(self, state: State) -> None:
        assert state.world_model is not None
        self.state = state
        has_calls = importlib.util.find_spec("aiortc") is not None
        recordings, workers = recording_settings(state.config), state.model_services.world()
        settings = WorldSettings.of(state.config, recordings, webrtc=has_calls, workers=workers)
        self.engine = WorldEngine(state.registry, state.world_model, settings)
        state.metrics.registry.register(CapacityCollector(self.engine))
        #: The players' session owners, the engine's: a call (``world_calls.py``) joins them too.
        self.connections = self.engine.owners
        #: The WebRTC transport (``server/webrtc/world_calls.py``), with aiortc (the ``webrtc`` extra).
        self.calls: WorldCallService | None = None
        if has_calls:
            from livegen.server.webrtc.world_calls import WorldCallService

            self.calls = WorldCallService(self)

    def routes(self) -> list[BaseRoute]:
        routes = [WebSocketRoute("/v1/worlds", self._endpoint), *recording_routes(self.engine)]
        return routes + (self.calls.routes() if self.calls is not None else [])

    async def start(self) -> None:
        await self.engine.start()

    async def stop(self) -> None:
        if self.calls is not None:
            await self.calls.stop()
        await self.engine.stop()

    def health(self) -> dict[str, Any]:
        return self.engine.health()

    async def _endpoint(self, websocket: WebSocket) -> None:
        await websocket.accept(subprotocol=select_subprotocol(websocket.scope))
        link, query = WebSocketLink(websocket), websocket.query_params
        if (spectated := query.get("spectate")) is not None:  # a read-only spectator of a live session
            await self.engine.spectate(spectated, query.get("token", ""), link)
        elif (joined := query.get("join")) is not None:  # a player joining another's session
            await self.engine.join(joined, query.get("token", ""), link)
        else:
            await self.engine.serve(link, self.state.metrics)
