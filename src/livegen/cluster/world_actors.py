"""Ray workers: a world model in a Ray actor, for when one machine is not enough.

Each ``RayWorker`` is the ``Worker`` contract (``workers.py``) over one Ray
actor. The actor loads the model by its registry name in its own process
(so livegen must be installed wherever the actor lands), allocates its own
KV storage there, and steps the batches it is sent. A plain actor runs one
call at a time in submission order, which keeps the in-process worker's
promise: a release lands between steps, never during one. The ``WorkerPool``
decides which actor holds which session; this module only moves calls.

Ray is imported lazily: a plain install (no ``ray`` extra) never needs it.
``Cluster`` is the connection: a local Ray started here (and shut down with
the server) or an existing cluster joined at ``--ray-address``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from livegen.cluster.ray import import_ray
from livegen.errors import ConfigError
from livegen.logs import log_event
from livegen.models.world import Chunk, Tick, WorldModel, WorldSpec
from livegen.world import freeze, thaw

logger = logging.getLogger("livegen.world")
#: How long actors may take to be placed and to load the model before start-up gives up.
START_TIMEOUT_S = 300.0


class ModelHost:
    """The actor's body: one model and its KV storage in the actor's process."""

    def __init__(self, model_name: str, options: Mapping[str, Any] | None = None) -> None:
        from livegen.models import default_registry

        # ``options`` (a weights path, dtype, device) name things on the actor's node.
        self.model: WorldModel = default_registry().load(model_name, options)
        self.kv_storage: Any = None
        #: Sessions stepped here and not released since: what this process holds.
        self.sessions: set[str] = set()

    def spec(self) -> WorldSpec:
        return self.model.spec

    def start(self, num_kv_pages: int | None) -> None:
        if num_kv_pages is not None:
            self.kv_storage = self.model.new_kv_storage(num_kv_pages)

    def step(self, ticks: list[Tick]) -> list[Chunk]:
        ticks = [replace(tick, controls=refreeze(tick.controls)) for tick in ticks]
        chunks = self.model.step(ticks, self.kv_storage)
        self.sessions.update(tick.meta.session_id for tick in ticks)
        return chunks

    def release(self, session_id: str) -> None:
        self.model.release(session_id)
        self.sessions.discard(session_id)

    def held_sessions(self) -> list[str]:
        return sorted(self.sessions)


def thaw_controls(controls: Mapping[str, Any]) -> dict[str, Any]:
    """Plain JSON values for the trip: the cores' frozen values do not pickle."""
    return {name: thaw(data) for name, data in controls.items()}


def refreeze(controls: Mapping[str, Any]) -> dict[str, Any]:
    """The frozen values the model sees in process, rebuilt on the actor's side."""
    return {name: freeze(data) for name, data in controls.items()}


class RayWorker:
    """One Ray actor hosting the model; calls are awaited on the caller's event loop."""

    def __init__(self, actor: Any, spec: WorldSpec, name: str) -> None:
        self.actor = actor
        self.spec = spec
        self.name = name
        self.is_alive = True
        self._ray = import_ray()

    async def start(self, num_kv_pages: int | None) -> None:
        await self._call(self.actor.start.remote(num_kv_pages))

    async def step(self, ticks: Sequence[Tick]) -> list[Chunk]:
        portable = [replace(tick, controls=thaw_controls(tick.controls)) for tick in ticks]
        chunks: list[Chunk] = await self._call(self.actor.step.remote(portable))
        return chunks

    async def release(self, session_id: str) -> None:
        # An actor whose process is gone took the session's state with it: released.
        with contextlib.suppress(self._ray.exceptions.RayActorError):
            await self._call(self.actor.release.remote(session_id))

    async def held_sessions(self) -> list[str]:
        """The sessions whose state the actor holds (for health checks and tests)."""
        sessions: list[str] = await self._call(self.actor.held_sessions.remote())
        return sessions

    async def close(self) -> None:
        self._ray.kill(self.actor)

    async def _call(self, ref: Any) -> Any:
        try:
            return await result_of(ref)
        except self._ray.exceptions.RayActorError as exc:
            if self.is_alive:
                log_event(logger, "ray_worker.lost", logging.ERROR, worker=self.name, error=str(exc))
            self.is_alive = False
            raise


async def result_of(ref: Any) -> Any:
    """Await an actor call; a model's own exception comes back as itself, not wrapped."""
    ray = import_ray()
    try:
        return await ref
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, Exception):
            raise cause from exc
        raise


class Cluster:
    """A Ray connection: a local Ray started here, or a running cluster joined at an address."""

    def __init__(self, is_owner: bool) -> None:
        self.is_owner = is_owner
        self._ray = import_ray()

    @classmethod
    async def connect(cls, address: str | None, num_workers: int = 1) -> Cluster:
        """Join Ray at ``address`` (None: start a local Ray); reuse a connection made already.

        A local Ray gets at least one CPU per worker, so that every actor can be placed.
        """
        ray = import_ray()
        if ray.is_initialized():
            return cls(is_owner=False)
        # "local": a Ray of this server's own. ray.init() without an address joins whatever Ray
        # it finds on the machine (RAY_ADDRESS, the last `ray start`), and refuses num_cpus there.
        options: dict[str, Any] = {"address": address or "local", "log_to_driver": False}
        if address is None:
            options["num_cpus"] = max(os.cpu_count() or 1, num_workers)
        await asyncio.to_thread(ray.init, **options)
        log_event(logger, "ray.connected", address=address or "local")
        return cls(is_owner=True)

    async def start_workers(
        self, model_name: str, num_workers: int, options: Mapping[str, Any] | None = None
    ) -> list[RayWorker]:
        """Start ``num_workers`` actors, spread over the cluster's nodes, each loading the model."""
        host = self._ray.remote(num_cpus=1, scheduling_strategy="SPREAD")(ModelHost)
        actors = [host.remote(model_name, dict(options or {})) for _ in range(num_workers)]
        loading = asyncio.gather(*(result_of(actor.spec.remote()) for actor in actors))
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                specs = await loading
        except BaseException as exc:
            for actor in actors:
                self._ray.kill(actor)
            if isinstance(exc, TimeoutError):
                raise ConfigError(
                    f"Ray did not start {num_workers} world workers of {model_name!r} in "
                    f"{START_TIMEOUT_S:.0f} s: each needs 1 CPU on a node with livegen installed"
                ) from None
            raise
        named = enumerate(zip(actors, specs, strict=True))
        return [RayWorker(actor, spec, f"ray-{index}") for index, (actor, spec) in named]

    async def close(self) -> None:
        if self.is_owner:
            await asyncio.to_thread(self._ray.shutdown)


__all__ = ["Cluster", "ModelHost", "RayWorker", "refreeze", "result_of", "thaw_controls"]
