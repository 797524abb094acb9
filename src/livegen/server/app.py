"""The ASGI app: health, model list, metrics, auth, and the services' routes.

Built by ``create_app(config)``. Services (one per kind of session) are
started in the background after the server is listening, so that ``/health``
can answer 503 with what is still loading instead of the server refusing
connections while a model loads.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from livegen.cluster.gate import GateMiddleware, may_see_private
from livegen.logs import log_event, quiet_client_faults
from livegen.models import Kind, Registry, default_registry
from livegen.server import page
from livegen.server.audio import routes as audio
from livegen.server.config import ServerConfig
from livegen.server.http.auth import APIKeyMiddleware
from livegen.server.http.bodies import BodyLimitMiddleware, BodyLimits
from livegen.server.http.budgets import ConnectionBudgetMiddleware, export_budgets
from livegen.server.http.origins import OriginMiddleware, OriginPolicy
from livegen.server.metrics import CONTENT_TYPE_LATEST
from livegen.server.service import Service
from livegen.server.state import State

logger = logging.getLogger("livegen.server")


def create_app(config: ServerConfig | None = None, registry: Registry | None = None) -> Starlette:
    config = config or ServerConfig()
    quiet_client_faults()  # a client's bad frame is one warning line, never a traceback
    state = State(config, registry or default_registry())
    # Resolve model names now, so a typo fails `livegen serve` before it listens.
    state.voice_model = state.registry.resolve(Kind.VOICE, config.voice_model)
    state.world_model = state.registry.resolve(Kind.WORLD, config.world_model)
    state.services = _services(state)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state.starting = state.tasks.spawn(_start_services(state))
        try:
            yield
        finally:
            await state.tasks.aclose()
            await state.stop_services()
            await state.tasks.aclose()  # what the stop itself started (a trim after sessions ended)

    routes: list[BaseRoute] = [
        Route("/health", _health, methods=["GET"]),
        Route("/v1/models", _list_models, methods=["GET"]),
        Route("/metrics", _metrics, methods=["GET"]),
        *page.routes(),
    ]
    for service in state.services:
        routes.extend(service.routes())
    routes.extend(audio.routes(state))  # /v1/audio/*: the voice model's whole-clip endpoints
    app = Starlette(routes=routes, middleware=_middleware(state), lifespan=lifespan)
    app.state.livegen = state
    return app


def _middleware(state: State) -> list[Middleware]:
    """Outermost first: how large and slow a body may be, who may ask (Host, Origin), how many at
    once, then the key."""
    config, metrics = state.config, state.metrics
    export_budgets(config, metrics)
    policy = OriginPolicy.build(config.host, config.api_key, config.allowed_hosts, config.allowed_origins)

    def on_refused(code: str) -> None:
        metrics.refused.labels(code=code).inc()

    return [
        Middleware(BodyLimitMiddleware, limits=BodyLimits.of(config)),
        Middleware(OriginMiddleware, policy=policy, on_refused=on_refused),
        Middleware(ConnectionBudgetMiddleware, config=config, metrics=metrics, tasks=state.tasks),
        Middleware(GateMiddleware, gate=state.gate),
        Middleware(APIKeyMiddleware, api_key=config.api_key, client_secrets=state.client_secrets),
    ]


def _services(state: State) -> list[Service]:
    """One service per kind of session whose model is configured."""
    services: list[Service] = []
    if state.world_model is not None:
        from livegen.server.world.service import WorldService

        services.append(WorldService(state))
    if state.voice_model is not None:
        from livegen.server.realtime.voice import VoiceService

        services.append(VoiceService(state))
    return services


async def _start_services(state: State) -> None:
    for service in state.services:
        try:
            await service.start()
            log_event(logger, "service.started", service=service.name)
        except Exception as exc:  # a broken model must not take the server down
            state.failed[service.name] = f"{type(exc).__name__}: {exc}"
            log_event(logger, "service.failed", logging.ERROR, service=service.name, error=str(exc))


def _state(request: Request) -> State:
    state: State = request.app.state.livegen
    return state


async def _health(request: Request) -> Response:
    state = _state(request)
    services: dict[str, Any] = {}
    for service in state.services:
        report = dict(service.health())
        if service.name in state.failed:
            report.update(ready=False, error=state.failed[service.name])
        services[service.name] = report
    is_ready = all(report.get("ready") for report in services.values()) and not state.gate.draining
    status = "draining" if state.gate.draining else "ok" if is_ready else "unavailable"
    body: dict[str, Any] = {"status": status, "services": services}
    if state.gate.member is not None:  # a process of a cluster: the cluster's services too
        private = may_see_private(request.scope, state.config.api_key)
        body["cluster"] = await state.gate.member.report(private)
    return JSONResponse(body, status_code=200 if is_ready else 503)


async def _list_models(request: Request) -> Response:
    registry = _state(request).registry
    data = [
        {
            "id": entry.name,
            "object": "model",
            "created": 0,
            "owned_by": "livegen",
            "kind": entry.kind.value,
            "available": entry.is_available(),
            "loaded": registry.is_loaded(entry.name),
            "description": entry.description,
        }
        for entry in registry.entries()
    ]
    return JSONResponse({"object": "list", "data": data})


async def _metrics(request: Request) -> Response:
    return Response(_state(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)


__all__ = ["Kind", "ServerConfig", "State", "create_app"]
