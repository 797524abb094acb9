"""The seam between the engines and scale-out: which model services a process uses, chosen once.

As vLLM's ``EngineCoreClient.make_client`` picks an in-process or another
process's engine once, and everything above it sees one interface, ``choose``
reads the configuration and ``LIVEGEN_CLUSTER`` (``mode.py``) once, when the
app is made, and the engines are handed what it chose: they never ask whether
they are scaled out, and import nothing of this package.

- voice (``runtime/voice/models.py``'s ``SharedModels``): in a server process
  of a cluster, a lockstep model's one clock (``lockstep.py``) and the
  cascade's heavy parts (``speech.py``); none each, in a server of its own;
- world (``runtime/world/workers.py``'s ``WorkerSource``): in a cluster, the
  cluster's shared world services (``world.py``); else ``--world-workers`` Ray
  actors of this process's own (``world_actors.py``); else none (in-process).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from livegen.cluster import mode
from livegen.cluster.ray import MISSING, has_ray
from livegen.errors import ConfigError
from livegen.logs import log_event
from livegen.models.registry import ModelInfo
from livegen.models.voice import VoiceModel
from livegen.runtime.voice.lockstep import Clock
from livegen.runtime.voice.models import SharedModels
from livegen.runtime.world.workers import Worker, WorkerSource

logger = logging.getLogger("livegen.world")


class ClusterConfig(Protocol):
    """What the choice reads of the server's options (``server.config.ServerConfig``)."""

    @property
    def world_workers(self) -> int: ...
    @property
    def ray_address(self) -> str | None: ...


class ClusterLockstep:
    """The cluster's lockstep service, as ``runtime/voice/models.py``'s ``SharedLockstep``."""

    async def connect(self, entry: ModelInfo, options: Mapping[str, str] | None, headroom: float) -> Clock:
        from livegen.cluster import lockstep

        return await lockstep.connect(entry, options, headroom)


class ClusterSpeech:
    """The cluster's speech service, as ``models/voice.py``'s ``SharedSpeech``."""

    def connect(self, settings: Any) -> VoiceModel:
        from livegen.cluster import speech

        return speech.connect(settings)


class SharedWorlds:
    """The cluster's shared world services (``world.py``), as a ``WorkerSource``."""

    def __init__(self, member: mode.Membership, count: int) -> None:
        self.member, self.count = member, count

    async def start(self, entry: ModelInfo, options: Mapping[str, Any], kv_budget_bytes: int) -> list[Worker]:
        from livegen.cluster.world import attach

        return list(await attach(entry, options, self.count, kv_budget_bytes, self.member))

    async def close(self) -> None:
        """Nothing: the services are the cluster's; its last ``livegen serve`` stops them."""


class RayWorkers:
    """``--world-workers`` Ray actors of this process's own (``world_actors.py``), as a ``WorkerSource``."""

    def __init__(self, address: str | None, count: int) -> None:
        self.address, self.count = address, count
        self.cluster: Any = None

    async def start(self, entry: ModelInfo, options: Mapping[str, Any], kv_budget_bytes: int) -> list[Worker]:
        from livegen.cluster.world_actors import Cluster

        self.cluster = await Cluster.connect(self.address, self.count)
        workers = await self.cluster.start_workers(entry.name, self.count, dict(options))
        log_event(logger, "world.workers_started", model=entry.name, num_workers=self.count)
        return list(workers)

    async def close(self) -> None:
        if self.cluster is not None:
            await self.cluster.close()


@dataclass(frozen=True)
class Services:
    """What ``choose`` chose for this process: the voice models' shared services, and the
    world model's workers (a new source for each engine: ``world()``)."""

    voice: SharedModels
    member: mode.Membership | None
    world_workers: int
    ray_address: str | None

    def world(self) -> WorkerSource | None:
        if self.member is not None:
            return SharedWorlds(self.member, max(1, self.world_workers))
        if self.world_workers > 0:
            return RayWorkers(self.ray_address, self.world_workers)
        return None


def choose(config: ClusterConfig) -> Services:
    """This process's services, from its options and ``LIVEGEN_CLUSTER`` (read once, here)."""
    member = mode.membership()
    if (member is not None or config.world_workers > 0) and not has_ray():
        raise ConfigError(MISSING)
    voice = SharedModels(ClusterLockstep(), ClusterSpeech()) if member is not None else SharedModels()
    return Services(voice, member, config.world_workers, config.ray_address)


__all__ = ["ClusterLockstep", "ClusterSpeech", "RayWorkers", "Services", "SharedWorlds", "choose"]
