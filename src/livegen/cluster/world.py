"""World models as model services of a Ray cluster, loaded once and shared by every server process.

``livegen serve --workers N`` (and ``--ray-address``) runs many server
processes. Each used to load the world model itself (``LocalWorker``) or start
``--world-workers`` Ray actors of its own: N copies, N KV budgets. In a cluster
the model runs instead in ``max(1, --world-workers)`` named, detached actors,
``livegen-world-<model>-<i>`` in the cluster's namespace, created by the first
process with ``get_if_exists`` and attached to by every other
(``cluster/supervisor.py`` tells a process it is one of a cluster through
``LIVEGEN_CLUSTER``, ``mode.py``). Each asks Ray for a CPU, and a GPU where the model runs
on one (``--world-device cuda``), so Ray places it where those are. The first
process's options (weights, device) configure them; the last ``livegen serve`` of the cluster stops them
(``cluster/coordinator.py`` ``stop_services``), and ``/health`` lists each by its
``report``.

KV pages are the service's, never a process's (``WorldHost``): one
``kv_pool.Pool`` per actor, indexing that actor's tensors. Admission is an
awaited call at a session's creation (``SharedWorker.admit``): the sum of
admitted sessions over all processes never passes the actor's capacity, and a
full pool refuses then, with ``kv_pool_full``, never mid-rollout. A step's
pages are planned, committed or aborted inside the actor, around the model's
step, so two processes never write the same pages. Sessions are keyed in the
actor by the process's cluster tag and the session id (``tag.id``): ids
minted by two processes never collide there.

The frame clock's admission (``realtime_capacity``, ``runtime/world/admission.py``)
stays each process's, from the step times it measures; a step waits in the actor
behind the other processes' steps, so a process's time per tick grows with
their sessions, and its estimate of the service's load counts them too.

A process that dies leaves its sessions in the actor: the actor releases the
sessions (pages, admission and model state) of every tag the cluster's
coordinator no longer lists (the supervisor drops a dead process's tag at
once), on an admission that finds the pool full and at most every ``SWEEP_S``
seconds on any admission or ``report`` (``/health``). A tag still listed by a
coordinator whose supervisor died with its machine is not swept.

An actor that dies is restarted by Ray (``max_restarts``): it loads the model
again, with empty pools. The steps it was serving fail with ``state_evicted``
(``WorkerRestarted``): the sessions' state is gone, and each goes on after
``world.reset``, re-admitted on its next rollout's first chunk.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from livegen.cluster.mode import Membership
from livegen.cluster.ray import import_ray, was_restarted
from livegen.cluster.world_actors import refreeze, result_of, thaw_controls
from livegen.errors import CapacityExceeded, ConfigError, StateEvicted
from livegen.logs import log_event
from livegen.models import ModelInfo, Registry
from livegen.models.world import Chunk, Tick, WorldModel, WorldSpec
from livegen.runtime.world.kv_pool import Pool
from livegen.runtime.world.workers import WorkerRestarted

logger = logging.getLogger("livegen.world")

#: The services' names: ``livegen-world-<model>-<index>``.
PREFIX = "livegen-world"
#: How often (at most) an actor asks the coordinator which processes are gone, unless it is full.
SWEEP_S = 10.0
#: How old a process's view of a service's counts may get before ``/health`` asks again.
REFRESH_S = 1.0
#: How long the services may take to be placed and to load the model before start-up gives up.
START_TIMEOUT_S = 300.0


def service_name(model: str, index: int) -> str:
    return f"{PREFIX}-{model}-{index}"


def _key(tag: str, session_id: str) -> str:
    return f"{tag}.{session_id}"


class WorldHost:
    """The actor's body: the model, its KV storage and the pool naming its pages, for every
    process's sessions (keyed ``tag.id``). Plain methods: Ray runs them one at a time, in order."""

    def __init__(
        self,
        name: str,
        entry: ModelInfo,
        options: Mapping[str, Any],
        kv_budget_bytes: int,
        cluster: Membership,
    ) -> None:
        self.name, self.cluster = name, cluster
        # ``options`` (a weights path, dtype, device) name things on the actor's node.
        self.model: WorldModel = Registry([entry]).load(entry.name, dict(options))
        spec = self.model.spec
        self.pool = Pool.for_spec(spec, kv_budget_bytes) if spec.kv is not None else None
        self.kv_storage = self.model.new_kv_storage(self.pool.num_pages) if self.pool is not None else None
        #: Session key (``tag.id``) -> the tag of the process that admitted it.
        self.sessions: dict[str, str] = {}
        self.started_at = time.time()
        self.swept_at = 0.0
        self.num_steps = 0
        self.num_swept = 0
        self.restarted = was_restarted()

    def spec(self) -> WorldSpec:
        return self.model.spec

    def admit(self, tag: str, session_id: str) -> dict[str, Any]:
        """Admit a session: ``{"admitted": bool, "message": str, "sessions": n, "capacity": c}``
        (a refusal is an answer, not an exception: the process raises ``CapacityExceeded``)."""
        key = _key(tag, session_id)
        self._sweep(force=self._is_full())
        admitted = key in self.sessions or not self._is_full()
        if admitted:
            self._admit(tag, key)
        message = "" if admitted else self._full_message()
        return {"admitted": admitted, "message": message, **self._counts()}

    def step(self, tag: str, ticks: list[Tick]) -> tuple[list[Chunk], dict[str, Any]]:
        """One batch of one process's ticks: pages planned here, committed if the model steps,
        given back if it raises; chunks carry the process's own session ids."""
        planned: list[str] = []
        try:
            keyed = [self._keyed(tag, tick, planned) for tick in ticks]
            chunks = self.model.step(keyed, self.kv_storage)
        except BaseException:
            for key in planned:
                self.pool.abort(key)  # type: ignore[union-attr]  # planned only with a pool
            raise
        for key in planned:
            self.pool.commit(key)  # type: ignore[union-attr]
        self.num_steps += 1
        metas = {tick.meta.request_id: tick.meta for tick in ticks}
        return [replace(c, meta=metas.get(c.meta.request_id, c.meta)) for c in chunks], self._counts()

    def _keyed(self, tag: str, tick: Tick, planned: list[str]) -> Tick:
        key, index = _key(tag, tick.meta.session_id), tick.meta.chunk_index
        if key not in self.sessions:
            if index > 0:
                raise StateEvicted(
                    f"the world service {self.name} holds no state of this session (it was restarted)"
                )
            if self._is_full():  # a session of a restarted service, re-admitted on its new rollout
                raise CapacityExceeded(self._full_message(), code="kv_pool_full")
            self._admit(tag, key)
        context: tuple[int, ...] = ()
        write: tuple[int, ...] = ()
        if self.pool is not None:
            context, write = self.pool.plan(key, index, len(tick.write_pages) or None)
            planned.append(key)
        meta = replace(tick.meta, session_id=key)
        controls = refreeze(tick.controls)
        return replace(tick, meta=meta, controls=controls, context_pages=context, write_pages=write)

    def clear(self, tag: str, session_id: str) -> None:
        """Forget the session's model state and pages (failure, reset); it stays admitted."""
        key = _key(tag, session_id)
        self.model.release(key)
        if self.pool is not None:
            self.pool.clear(key)

    def remove(self, tag: str, session_id: str) -> None:
        """The session left (close, disconnect): its state, pages and admission go."""
        key = _key(tag, session_id)
        self.model.release(key)
        if self.pool is not None:
            self.pool.release(key)
        self.sessions.pop(key, None)

    def counts(self) -> dict[str, Any]:
        """Sessions admitted (every process's) and capacity, for a process's ``/health``."""
        self._sweep(force=False)
        return self._counts()

    def report(self) -> dict[str, Any]:
        """The service for ``/health``: where it runs, its sessions by process, whether restarted."""
        self._sweep(force=False)
        ray = import_ray()
        by_tag: dict[str, int] = {}
        for tag in self.sessions.values():
            by_tag[tag] = by_tag.get(tag, 0) + 1
        return {
            "name": self.name,
            "ready": True,
            "model": self.model.name,
            "pid": os.getpid(),
            "node": ray.util.get_node_ip_address(),
            "restarted": self.restarted,
            "started_at": self.started_at,
            "steps": self.num_steps,
            "sessions_by_process": by_tag,
            "sessions_swept": self.num_swept,
            **self._counts(),
        }

    # -- bookkeeping -----------------------------------------------------------------------
    def _admit(self, tag: str, key: str) -> None:
        if self.pool is not None:
            self.pool.admit(key)
        self.sessions[key] = tag

    def _is_full(self) -> bool:
        return self.pool is not None and self.pool.is_full

    def _full_message(self) -> str:
        assert self.pool is not None
        return (
            f"KV pool full: the cluster's world service {self.name} holds {self.pool.capacity} sessions "
            f"of {self.pool.pages_per_session} pages each, for every server process"
        )

    def _counts(self) -> dict[str, Any]:
        return {"sessions": len(self.sessions), "capacity": None if self.pool is None else self.pool.capacity}

    def _sweep(self, *, force: bool) -> None:
        """Release the sessions of processes the coordinator no longer lists (they died)."""
        now = time.monotonic()
        if not self.sessions or (not force and now - self.swept_at < SWEEP_S):
            return
        self.swept_at = now
        live = self._live_tags()
        if live is None:
            return
        for key, tag in list(self.sessions.items()):
            if tag not in live:
                self.remove(tag, key.partition(".")[2])
                self.num_swept += 1
                log_event(logger, "world_service.swept", service=self.name, session=key)

    def _live_tags(self) -> set[str] | None:
        """The tags the coordinator lists; None when it cannot say (nothing is swept then)."""
        ray = import_ray()
        try:
            coordinator = ray.get_actor(self.cluster.coordinator, namespace=self.cluster.namespace)
            report = ray.get(coordinator.report.remote(), timeout=5.0)
        except Exception as exc:
            log_event(logger, "world_service.no_coordinator", logging.WARNING, error=repr(exc))
            return None
        return {str(process["tag"]) for process in report["processes"]}


class SharedWorker:
    """A process's handle on one of the cluster's world services: the ``Worker`` contract, plus
    the awaited admission the ``WorkerPool`` makes at a session's creation."""

    #: The ``WorkerPool`` leaves this worker's pages and admission to the service.
    is_shared = True

    def __init__(self, actor: Any, spec: WorldSpec, name: str, tag: str) -> None:
        self.actor, self.spec, self.name, self.tag = actor, spec, name, tag
        #: Ray restarts the service: it is never lost for good (a step it was serving fails).
        self.is_alive = True
        #: The service's sessions (of every process) and capacity, as its last answer said.
        self.num_sessions = 0
        self.capacity: int | None = None
        self.counted_at = 0.0
        self._is_refreshing = False
        self._ray = import_ray()

    @property
    def is_full(self) -> bool:
        return self.capacity is not None and self.num_sessions >= self.capacity

    async def start(self, num_kv_pages: int | None) -> None:
        """Nothing: the service allocated its KV storage when it loaded the model."""

    async def admit(self, session_id: str) -> None:
        answer = await self._call(self.actor.admit.remote(self.tag, session_id))
        self._counted(answer)
        if not answer["admitted"]:
            raise CapacityExceeded(answer["message"], code="kv_pool_full")

    async def step(self, ticks: Sequence[Tick]) -> list[Chunk]:
        portable = [replace(tick, controls=thaw_controls(tick.controls)) for tick in ticks]
        chunks, counts = await self._call(self.actor.step.remote(self.tag, portable))
        self._counted(counts)
        return list(chunks)

    async def release(self, session_id: str) -> None:
        with contextlib.suppress(WorkerRestarted):  # a restarted service holds nothing of it
            await self._call(self.actor.clear.remote(self.tag, session_id))

    def forget(self, session_id: str) -> None:
        """The session left: its admission goes (in order after this process's earlier calls)."""
        self.actor.remove.remote(self.tag, session_id)

    async def close(self) -> None:
        """Nothing: the service is the cluster's, and outlives this process."""

    def refresh(self) -> None:
        """Ask the service for its counts if the last answer is over ``REFRESH_S`` old, without
        waiting (``/health`` reads the answer next time): other processes' sessions come and go."""
        if self._is_refreshing or time.monotonic() - self.counted_at < REFRESH_S:
            return
        self._is_refreshing = True
        self.actor.counts.remote().future().add_done_callback(self._refreshed)

    def _refreshed(self, future: concurrent.futures.Future[Any]) -> None:
        self._is_refreshing = False  # on Ray's thread: plain assignments
        with contextlib.suppress(Exception):  # a service restarting answers the next time
            self._counted(future.result())

    def _counted(self, counts: Mapping[str, Any]) -> None:
        self.num_sessions, self.capacity = int(counts["sessions"]), counts["capacity"]
        self.counted_at = time.monotonic()

    async def _call(self, ref: Any) -> Any:
        try:
            return await result_of(ref)
        except self._ray.exceptions.RayActorError as exc:
            log_event(logger, "world_service.lost", logging.ERROR, service=self.name, error=str(exc)[:300])
            raise WorkerRestarted(
                f"the world service {self.name} died (Ray restarts it); the session's state is gone: "
                "send world.reset"
            ) from exc


async def attach(
    entry: ModelInfo,
    options: Mapping[str, Any],
    num_services: int,
    kv_budget_bytes: int,
    cluster: Membership,
) -> list[SharedWorker]:
    """The cluster's ``num_services`` world services of ``entry``: created here if no process has
    yet, each waited for until its model is loaded."""
    ray = import_ray()
    # A model on a GPU (``--world-device cuda``) asks Ray for one: its services land where one is.
    num_gpus = 1 if str(options.get("device", "")).startswith("cuda") else 0
    host = ray.remote(num_cpus=1, num_gpus=num_gpus, max_restarts=-1, max_concurrency=1)(WorldHost)
    names = [service_name(entry.name, index) for index in range(num_services)]
    # Detached: the process that happens to create them may die while the others serve on.
    common: dict[str, Any] = {"namespace": cluster.namespace, "get_if_exists": True, "lifetime": "detached"}
    if num_services > 1:
        common["scheduling_strategy"] = "SPREAD"
    actors = [
        host.options(name=name, **common).remote(name, entry, dict(options), kv_budget_bytes, cluster)
        for name in names
    ]
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            specs = await asyncio.gather(*(result_of(actor.spec.remote()) for actor in actors))
    except TimeoutError:
        raise ConfigError(
            f"the cluster's world services of {entry.name!r} were not ready within {START_TIMEOUT_S:.0f} s: "
            f"each needs 1 CPU{' and 1 GPU' if num_gpus else ''} on a node with livegen installed"
        ) from None
    log_event(logger, "world_service.attached", services=names, tag=cluster.tag)
    return [SharedWorker(a, s, n, cluster.tag) for a, s, n in zip(actors, specs, names, strict=True)]


__all__ = ["SharedWorker", "WorldHost", "attach", "service_name"]
