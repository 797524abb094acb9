"""What every route and service of one app shares (``State``), in a module of its own: the
services and transports name it, and the app that builds them imports them, so a ``State`` in
``server/app.py`` closed an import circle through every service."""

from __future__ import annotations

import asyncio

from livegen.cluster.gate import Gate
from livegen.cluster.services import choose as choose_services
from livegen.models import ModelInfo, Registry
from livegen.server.config import ServerConfig
from livegen.server.http.client_secrets import ClientSecrets
from livegen.server.metrics import Metrics
from livegen.server.service import Service
from livegen.tasks import TaskSet


class State:
    """What every route and service of one app shares."""

    def __init__(self, config: ServerConfig, registry: Registry) -> None:
        self.config = config
        self.registry = registry
        self.metrics = Metrics()
        self.services: list[Service] = []
        #: Service name -> error message, for services whose start failed.
        self.failed: dict[str, str] = {}
        self.starting: asyncio.Task[None] | None = None
        #: The app's own background tasks (the services' start, a memory trim): the lifespan
        #: cancels and awaits them.
        self.tasks = TaskSet()
        #: The models chosen for each kind, or None when that kind is not served.
        self.voice_model: ModelInfo | None = None
        self.world_model: ModelInfo | None = None
        #: Ephemeral client keys, minted by the voice service and checked by the auth middleware.
        self.client_secrets = ClientSecrets(max_bytes=config.max_client_secret_bytes)
        #: Draining, the server-wide session count and resumes owned elsewhere (``cluster/gate.py``).
        self.gate = Gate(config.max_sessions, self.client_secrets)
        #: Where the models run: in-process, or a cluster's services (chosen once, here).
        self.model_services = choose_services(config)
        self.stopped = False

    async def stop_services(self) -> None:
        """End every session (each with its terminal event) and stop the services, once."""
        if self.stopped:
            return
        self.stopped = True
        for service in self.services:
            await service.stop()
