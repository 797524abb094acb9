"""The cluster of server processes: one coordinator actor, and each process's view of it.

``livegen serve --workers N`` (and ``--ray-address``) runs the server as many
processes, on one machine or several, joined in one Ray cluster
(``cluster/supervisor.py`` starts them). What they must agree on lives in one
named Ray actor, the ``Coordinator`` (``livegen-coordinator`` in the
``livegen`` namespace; created by the first ``livegen serve`` that joins, and
owned by it, not detached):

- the processes: each gets a short *tag* (four hex digits, unique in the
  cluster) and registers the private address its resumes are forwarded to;
  every voice session id and WebRTC call id it mints carries its tag
  (``sess_`` or ``rtc_``, the tag, random), so any process knows a session's
  or a call's owner from its id alone, without a lookup per session;
- the ephemeral keys (``/v1/realtime/client_secrets``) any process minted,
  which another process adopts when a client presents one it does not know;
- the server-wide session counts: each ``livegen serve`` (a *group*) keeps
  ``--max-sessions`` for all its processes together; a count is held per
  process, so the counts of a process that died are dropped with it
  (``forget``), never leaked.

The cluster's model services (the cascade's recogniser and speech workers,
``cluster/speech.py``) are other named actors of the namespace:
``/health`` reports each (``services``), and the last ``livegen serve`` of a
cluster to stop stops them (``stop_services``).

A parked voice session cannot move: it holds its model's stream (a live
object of its process). So a resume is *forwarded*: the process that accepts
``?session_id=`` of another's tag relays the socket to the owner's private
address (``cluster/gate.py``), and the owner's own single-use token decides
between racing resumes. A process that is gone refuses (``session_not_found``).

``Member`` is one process's handle: its tag, its group, and awaited calls to
the coordinator. Ray is imported lazily: a single-process server never needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any

from livegen.cluster.ray import import_ray
from livegen.logs import log_event

logger = logging.getLogger("livegen.server")

NAMESPACE = "livegen"
COORDINATOR = "livegen-coordinator"
#: How long a cached tag -> address answer is trusted before it is asked again.
ADDRESS_TTL_S = 5.0


class Coordinator:
    """The actor's body: processes by tag, and session counts by group, kind and process."""

    def __init__(self) -> None:
        #: tag -> what the process registered (address, group, pid, node, started).
        self.processes: dict[str, dict[str, Any]] = {}
        #: (group, kind) -> tag -> sessions held by that process.
        self.counts: dict[tuple[str, str], dict[str, int]] = {}
        self._reserved: set[str] = set()
        #: Ephemeral keys minted by any process: key -> (expires_at, session).
        self.secrets: dict[str, tuple[float, dict[str, Any]]] = {}
        #: The secret a relayed connection carries (``cluster/gate.py``): only the cluster's own
        #: processes, which reach this actor through Ray (its token), know it.
        self._relay_key = secrets.token_urlsafe(32)

    def new_tag(self) -> str:
        """A tag no process of the cluster holds (four hex digits: it is part of every session id)."""
        while True:
            tag = secrets.token_hex(2)
            if tag not in self.processes and tag not in self._reserved:
                self._reserved.add(tag)
                return tag

    def relay_key(self) -> str:
        return self._relay_key

    def register(self, tag: str, info: dict[str, Any]) -> None:
        self._reserved.discard(tag)
        self.processes[tag] = {**info, "tag": tag, "registered_at": time.time()}

    def address(self, tag: str) -> str | None:
        process = self.processes.get(tag)
        return None if process is None else str(process["address"])

    def acquire(self, group: str, kind: str, tag: str, limit: int | None) -> bool:
        """One more session of ``kind`` for ``tag``, if the group holds fewer than ``limit``
        (None: always, counted: a resumed session is live again whatever the count)."""
        held = self.counts.setdefault((group, kind), {})
        if limit is not None and sum(held.values()) >= limit:
            return False
        held[tag] = held.get(tag, 0) + 1
        return True

    def release(self, group: str, kind: str, tag: str) -> None:
        held = self.counts.get((group, kind), {})
        if held.get(tag, 0) > 0:
            held[tag] -= 1

    def forget(self, tag: str) -> None:
        """A process that ended: its address and every count it held go."""
        self.processes.pop(tag, None)
        self._reserved.discard(tag)
        for held in self.counts.values():
            held.pop(tag, None)

    def add_secret(self, key: str, expires_at: float, session: dict[str, Any]) -> None:
        now = time.time()
        for stale in [k for k, (expiry, _) in self.secrets.items() if expiry <= now]:
            del self.secrets[stale]
        self.secrets[key] = (expires_at, session)

    def secret(self, key: str) -> tuple[float, dict[str, Any]] | None:
        found = self.secrets.get(key)
        return found if found is not None and found[0] > time.time() else None

    def report(self) -> dict[str, Any]:
        sessions: dict[str, dict[str, int]] = {}
        for (group, kind), held in self.counts.items():
            sessions.setdefault(group, {})[kind] = sum(held.values())
        return {"processes": sorted(self.processes.values(), key=lambda p: p["tag"]), "sessions": sessions}


def coordinator(ray: Any) -> Any:
    """The cluster's coordinator actor, created here if no process has yet."""
    actor = ray.remote(num_cpus=0, max_concurrency=1)(Coordinator)
    return actor.options(name=COORDINATOR, namespace=NAMESPACE, get_if_exists=True).remote()


def owner_tag(identifier: str) -> str:
    """The tag a session id (``sess_`` + tag + ...) or a call id (``rtc_`` + tag + ...) carries."""
    return identifier.partition("_")[2][:4]


@dataclass
class Member:
    """One server process in the cluster: its tag, its ``livegen serve`` group, the coordinator."""

    tag: str
    group: str
    actor: Any
    #: The private address other processes forward this process's resumes to.
    address: str = ""
    #: The cluster's shared secret that marks a relayed connection (``Coordinator.relay_key``).
    relay_key: str = ""

    def __post_init__(self) -> None:
        self._addresses: dict[str, tuple[float, str | None]] = {}

    def owns(self, identifier: str) -> bool:
        """Whether this process minted ``identifier`` (a session id or a call id)."""
        return owner_tag(identifier) == self.tag

    async def acquire(self, kind: str, limit: int | None) -> bool:
        """Room for one more session of ``kind`` server-wide; a coordinator that cannot answer
        admits (the process's own ``--max-sessions`` still holds)."""
        try:
            async with asyncio.timeout(5.0):
                return bool(await self.actor.acquire.remote(self.group, kind, self.tag, limit))
        except Exception as exc:  # the coordinator is gone: the process goes on alone
            log_event(logger, "cluster.unreachable", logging.WARNING, error=repr(exc))
            return True

    def release(self, kind: str) -> None:
        self.actor.release.remote(self.group, kind, self.tag)  # fire and forget: order is kept

    async def address_of(self, identifier: str) -> str | None:
        """The private address of the process that owns ``identifier`` (a session id or a call
        id); None if none does."""
        tag = owner_tag(identifier)
        cached = self._addresses.get(tag)
        now = time.monotonic()
        if cached is not None and now - cached[0] < ADDRESS_TTL_S:
            return cached[1]
        try:
            async with asyncio.timeout(5.0):
                address = await self.actor.address.remote(tag)
        except Exception as exc:
            log_event(logger, "cluster.unreachable", logging.WARNING, error=repr(exc))
            return None
        self._addresses[tag] = (now, address)
        return None if address is None else str(address)

    def publish_secret(self, key: str, expires_at: float, session: dict[str, Any]) -> None:
        """An ephemeral key minted here, for every process (fire and forget)."""
        self.actor.add_secret.remote(key, expires_at, session)

    async def secret(self, key: str) -> tuple[float, dict[str, Any]] | None:
        """A key another process minted; None when none did, or it expired."""
        try:
            async with asyncio.timeout(5.0):
                found = await self.actor.secret.remote(key)
        except Exception as exc:
            log_event(logger, "cluster.unreachable", logging.WARNING, error=repr(exc))
            return None
        return None if found is None else (float(found[0]), dict(found[1]))

    async def group_sessions(self) -> int:
        """The sessions every process of this ``livegen serve`` holds now; 0 when the coordinator
        cannot answer (a drain then waits for nothing it cannot see)."""
        try:
            async with asyncio.timeout(2.0):
                report: dict[str, Any] = await self.actor.report.remote()
        except Exception as exc:
            log_event(logger, "cluster.unreachable", logging.WARNING, error=repr(exc))
            return 0
        return sum(report["sessions"].get(self.group, {}).values())

    async def report(self, private: bool = False) -> dict[str, Any]:
        """The cluster for ``/health``: its processes, its server-wide counts, Ray's nodes; their
        addresses only when ``private`` (an authenticated request, ``gate.may_see_private``)."""
        try:
            async with asyncio.timeout(2.0):
                report: dict[str, Any] = await self.actor.report.remote()
        except Exception as exc:
            return {"tag": self.tag, "error": repr(exc)}
        ray = import_ray()
        nodes = await asyncio.to_thread(ray.nodes)
        report["nodes"] = [
            {"address": n["NodeManagerAddress"], "alive": n["Alive"], "resources": n.get("Resources", {})}
            for n in nodes
        ]
        report["services"] = await _services(ray)
        if not private:
            _hide_addresses(report)
        return {"tag": self.tag, "group": self.group, **report}


def _hide_addresses(report: dict[str, Any]) -> None:
    """The cluster's report without where its processes listen: the private ports, Ray's nodes."""
    for process in report["processes"]:
        process.pop("address", None)
    for node in report["nodes"]:
        node.pop("address", None)


def stop_services(ray: Any, coordinator: Any) -> None:
    """Stop the cluster's model services once no server process of any ``livegen serve`` is left
    in it: they are detached (a server process that dies must not take them with it), so the last
    ``livegen serve`` to stop stops them (a private Ray's shutdown does too)."""
    try:
        if ray.get(coordinator.report.remote(), timeout=10)["processes"]:
            return
        names = ray.util.list_named_actors()
    except Exception as exc:  # no coordinator to ask: leave the services to the cluster's owner
        log_event(logger, "cluster.unreachable", logging.WARNING, error=repr(exc))
        return
    for name in names:
        if name != COORDINATOR:
            with contextlib.suppress(Exception):
                ray.kill(ray.get_actor(name))
                log_event(logger, "cluster.service_stopped", service=name)


async def _services(ray: Any) -> list[dict[str, Any]]:
    """The cluster's model services (``cluster/speech.py``): every named actor of the
    namespace but the coordinator, by its own ``report``; one that does not answer (restarting,
    loading) by its name and why."""
    names = await asyncio.to_thread(ray.util.list_named_actors)
    services: list[dict[str, Any]] = []
    for name in sorted(n for n in names if n != COORDINATOR):
        try:
            async with asyncio.timeout(2.0):
                actor = await asyncio.to_thread(ray.get_actor, name)
                services.append(await actor.report.remote())
        except Exception as exc:
            services.append({"name": name, "ready": False, "error": f"{type(exc).__name__}: {exc}"[:300]})
    return services
