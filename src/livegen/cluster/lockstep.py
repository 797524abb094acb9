"""A lockstep voice model as one model service of a Ray cluster, its frame clock shared by every
server process.

``livegen serve --workers N`` (and ``--ray-address``) runs many server
processes. A lockstep (native full-duplex) model (``models/lockstep.py``, an
entry with ``lockstep=True``) used to be loaded in each, each with its own
``FrameClock``: N copies of the weights, N slot pools, N clocks stepping N
small batches. Here it is loaded once per cluster, in one named detached Ray
actor, ``LockstepService`` (``livegen-lockstep-<model>`` in the cluster's
namespace; whichever process asks first creates it, with its options and its
``--duplex-realtime-headroom``, the others get the same one:
``get_if_exists``; Ray restarts it if it dies: ``max_restarts``; with
``--voice-device cuda`` it is placed on a node with a free GPU). The model's
one ``FrameClock`` runs on the actor's event loop (an async actor), so
admission stays cluster-wide: the one slot pool and the one measured step
time refuse a session from any process with the same ``realtime_capacity``.
A handle whose actor is gone for good (killed by hand, stopped by another
``livegen serve``) is looked up or created again on the next join.

A server process of a cluster (``LIVEGEN_CLUSTER``, ``mode.py``, set by
``cluster/supervisor.py`` in each) serves the model through a ``RemoteClock``:
``join`` and ``leave`` like a ``FrameClock``'s, and a ``RemoteMember`` with a
``Member``'s face (``put``, ``clear``, ``outputs``, ``late_frames``,
``is_failed``), so ``lockstep_voice.py`` and the session layer do not know
where the clock is. Frames cross in two kinds of call: one per ``put`` of a
member's input PCM that completes a frame (its backpressure is the actor's
``MAX_QUEUED_FRAMES``),
and, per process, one long poll at a time that returns every output frame
ready for all its members (waiting for the next step when none is, or
``POLL_S``): a frame's added latency is one Ray round trip, and a process
makes one poll per frame period, whatever its number of sessions.

Slots of a process that dies are freed by the poll: a live member always has a
poll in flight or just answered (its session reads its frames, or fails past
``MAX_UNREAD_FRAMES``), so a member whose poll has not come for ``ORPHAN_S``
is one whose process is gone (killed, its node lost, its loop stalled that
long) and it leaves. Chosen over the coordinator's process tags because it
needs no other actor (a member of any ``livegen serve`` on the cluster, one
whose coordinator is gone), and it frees a hung process's slots too.

A service that dies (its process killed, its node lost) ends the sessions it
served, their state with it: each gets ``LockstepServiceUnavailable``
(``lockstep_service_unavailable``), from its failed poll or, when Ray restarted
it between two polls, from the restarted service that no longer knows it. The
server and its other sessions go on; new sessions are admitted once Ray has
it back. The last ``livegen serve`` of the cluster stops it
(``cluster/coordinator.py``'s ``stop_services``), and ``/health``'s ``cluster``
block lists its ``report``.

A single-process server keeps today's in-process ``FrameClock`` exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from livegen.cluster.ray import import_ray, service_head, was_restarted
from livegen.errors import CapacityExceeded, ConfigError, LockstepServiceUnavailable, ModelError
from livegen.logs import log_event
from livegen.models.lockstep import LockstepFrame, LockstepModel, LockstepSpec
from livegen.models.registry import ModelInfo, Registry
from livegen.models.voice import ModelHealth
from livegen.runtime.voice.lockstep import FrameClock, Member, Seat
from livegen.tasks import TaskSet

logger = logging.getLogger("livegen.cluster.lockstep")

#: The service's actor name, then the model's registry name.
NAME_PREFIX = "livegen-lockstep-"
#: CPUs the service asks Ray for: 0, so it never waits for the CPUs the supervisor counts for the
#: speech service and the world workers (its stepping thread is one busy thread all the same).
NUM_CPUS = 0
#: How long one poll waits for a frame before it answers none (a member polls again at once).
POLL_S = 1.0
#: A member whose poll has not come for this long belongs to a process that is gone: it leaves.
ORPHAN_S = 5.0
#: Seconds ``/health`` reports the service failing after a failed call.
FAILING_S = 30.0
#: How long the service may take to be placed and load its model before the server's start fails.
START_TIMEOUT_S = 600.0
#: How long a process waits for the service to free a slot before it lets go (the reaper frees it).
LEAVE_TIMEOUT_S = 5.0


class LockstepService:
    """The actor's body: the model, loaded once, and its one ``FrameClock`` for the whole cluster."""

    def __init__(self, entry: ModelInfo, options: Mapping[str, Any] | None, headroom: float) -> None:
        self.name = NAME_PREFIX + entry.name
        self.model = Registry([entry]).load(entry.name, options)
        if not isinstance(self.model, LockstepModel):
            raise ConfigError(f"model {entry.name!r} is registered as lockstep but is not one")
        self.clock = FrameClock(self.model, headroom=headroom)
        #: Members by key (session id and slot: a session may rejoin), and when each last polled.
        self.members: dict[str, Member] = {}
        self.polled: dict[str, float] = {}
        self.orphan_s = ORPHAN_S
        #: Members freed because their process stopped polling (it died).
        self.orphans_freed = 0
        self.started_at = time.time()
        self._tasks = TaskSet(logger)
        self._reaper: asyncio.Task[None] | None = None
        #: Whether Ray restarted this service (its process died): its sessions were lost.
        self.restarted = was_restarted()

    async def info(self) -> dict[str, Any]:
        """What a server process's ``RemoteClock`` needs to know of the model."""
        spec = self.model.spec
        return {"name": self.name, "spec": [spec.sample_rate, spec.frame_samples, spec.max_sessions]}

    async def join(self, session_id: str, seed: int) -> dict[str, Any]:
        """A seat at the clock: its key and slot, or why the clock refuses (``realtime_capacity``)."""
        try:
            member = await self.clock.join(session_id, seed)
        except CapacityExceeded as exc:
            return {"refused": exc.message}
        key = f"{session_id}/{member.slot}"
        self.members[key] = member
        self.polled[key] = time.monotonic()
        if self._reaper is None or self._reaper.done():
            self._reaper = self._tasks.spawn(self._reap(), name="livegen-lockstep-reaper")
        return {"key": key, "slot": member.slot}

    async def put(self, key: str, pcm: bytes) -> bool:
        """Input PCM for a member (waits while its queue is full); False: no such member."""
        member = self.members.get(key)
        if member is None:
            return False
        await member.put(pcm)
        return True

    async def clear(self, key: str) -> None:
        if (member := self.members.get(key)) is not None:
            member.clear()

    async def poll(self, keys: list[str], wait_s: float) -> dict[str, Any]:
        """Every output frame ready of each member of ``keys`` (one process's), waiting up to
        ``wait_s`` for the next step when none has one; a member's failed frame as its message,
        and None for a member not here (the service was restarted, or it freed it)."""
        members = {key: self.members.get(key) for key in keys}
        self._stamp(keys)
        live = [member for member in members.values() if member is not None]
        if live and all(member.outputs.empty() for member in live):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self.clock.stepped()
        self._stamp(keys)
        answers: dict[str, dict[str, Any] | None] = {}
        for key, member in members.items():
            if member is None or self.members.get(key) is not member:
                answers[key] = None
                continue
            frames = [_wired(member.outputs.get_nowait()) for _ in range(member.outputs.qsize())]
            answers[key] = {"frames": frames, "late_frames": member.late_frames}
        return {"members": answers, "clock": self._clock()}

    def _stamp(self, keys: list[str]) -> None:
        now = time.monotonic()
        for key in keys:
            if key in self.polled:
                self.polled[key] = now

    async def leave(self, key: str) -> None:
        member = self.members.pop(key, None)
        self.polled.pop(key, None)
        if member is not None:
            member.clear()  # a put still waiting for room returns
            await self.clock.leave(member)

    async def _reap(self) -> None:
        """Free the members whose process stopped polling (``ORPHAN_S``)."""
        while self.members:
            await asyncio.sleep(self.orphan_s / 4)
            now = time.monotonic()
            for key in [k for k, at in self.polled.items() if now - at > self.orphan_s]:
                log_event(logger, "lockstep.orphan_freed", logging.WARNING, member=key)
                self.orphans_freed += 1
                await self.leave(key)

    def _clock(self) -> dict[str, Any]:
        clock = self.clock
        return {"step_cost_s": clock.step_cost_s, "missed_frames": clock.missed_frames, "steps": clock.steps}

    async def report(self) -> dict[str, Any]:
        """The service for ``/health``: where it runs, its sessions, its steps and their cost."""
        cost = self.clock.step_cost_s
        return {
            **service_head(self.name, self.started_at, self.restarted, self.model.health()),
            "sessions": len(self.clock.members),
            "slots": self.model.spec.max_sessions,
            "steps": self.clock.steps,
            "missed_frames": self.clock.missed_frames,
            "step_ms": None if cost is None else round(1000 * cost, 2),
            "frame_ms": self.model.spec.frame_ms,
            "orphans_freed": self.orphans_freed,
        }


def _wired(result: LockstepFrame | ModelError) -> LockstepFrame | str:
    """A frame as it crosses to a process: itself, or a failure's message (errors do not pickle
    reliably; every failure of the clock reaches the wire as ``model_error`` anyway)."""
    return result if isinstance(result, LockstepFrame) else str(result)


def _actor(entry: ModelInfo, options: Mapping[str, Any] | None, headroom: float) -> Any:
    """The cluster's service of ``entry``: created here, with these options, if no process has yet
    (blocks: off the loop)."""
    ray = import_ray()
    # A model on a GPU (``--voice-device cuda``) is placed on a node with one free, and holds it.
    gpus = 1 if str((options or {}).get("device", "")).startswith("cuda") else 0
    remote = ray.remote(num_cpus=NUM_CPUS, num_gpus=gpus, max_restarts=-1, max_concurrency=1000)
    actor = remote(LockstepService)
    # Detached: the process that happens to create it may die while the others serve on; the last
    # ``livegen serve`` of the cluster stops it (``cluster/coordinator.py``).
    name = NAME_PREFIX + entry.name
    placed = actor.options(name=name, get_if_exists=True, lifetime="detached")
    return placed.remote(entry, dict(options) if options else None, headroom)


async def connect(entry: ModelInfo, options: Mapping[str, Any] | None, headroom: float) -> RemoteClock:
    """A server process's clock of ``entry``: the cluster's service, waited for until loaded."""
    actor = await asyncio.to_thread(_actor, entry, options, headroom)
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            info = await actor.info.remote()
    except TimeoutError:
        raise ConfigError(
            f"the cluster's lockstep service ({NAME_PREFIX}{entry.name}) was not ready within "
            f"{START_TIMEOUT_S:.0f} s"
        ) from None
    return RemoteClock(actor, info, functools.partial(_actor, entry, options, headroom))


class RemoteModel:
    """The model as a server process sees it: its spec, and its health as the service answered."""

    def __init__(self, clock: RemoteClock, spec: LockstepSpec) -> None:
        self.clock = clock
        self.spec = spec

    def health(self) -> ModelHealth:
        clock = self.clock
        is_failing = bool(clock.error) and time.time() - clock.failed_at < FAILING_S
        report: dict[str, Any] = {"name": clock.name, "ok": not is_failing, "failures": clock.failures}
        if clock.error:
            report.update(error=clock.error, failed_at=clock.failed_at)
        return ModelHealth(not is_failing, clock.error if is_failing else "", {"lockstep_service": report})


class RemoteMember(Seat):
    """A session's seat at the cluster's clock: ``put`` and ``clear`` go to the service, its frames
    come back through its ``RemoteClock``'s poll into ``outputs``."""

    def __init__(self, clock: RemoteClock, key: str, session_id: str, slot: int) -> None:
        super().__init__(session_id, slot)
        self.clock = clock
        self.key = key
        #: Input short of a whole frame, kept here: the clock can step only whole frames, so a
        #: call per frame at most, however small the appends (a call's 20 ms frames).
        self._partial = bytearray()

    async def put(self, pcm: bytes) -> None:
        if self.is_failed:
            return
        self._partial += pcm
        whole = len(self._partial) - len(self._partial) % self.clock.frame_bytes
        if not whole:
            return
        frames = bytes(self._partial[:whole])
        del self._partial[:whole]
        try:
            known = await self.clock.actor.put.remote(self.key, frames)
        except Exception as exc:
            self.deliver(self.clock.failure(exc))
            return
        if not known:
            self.deliver(self.clock.failure(None))

    def clear(self) -> None:
        self._partial.clear()
        if not self.is_failed:
            self.clock.actor.clear.remote(self.key)  # fire and forget: Ray keeps a caller's order


class RemoteClock:
    """A server process's face of the cluster's clock: ``FrameClock``'s ``join``, ``leave`` and
    ``stop``, and the clock's figures as the service last answered them. One long poll at a time
    brings the frames of all this process's members (not one per member: a call per frame per
    process, whatever its sessions)."""

    def __init__(self, actor: Any, info: dict[str, Any], find: Callable[[], Any] | None = None) -> None:
        self.actor = actor
        #: Looks the service up again, or creates it, when the handle's actor is gone for good.
        self._find = find
        self.is_lost = False
        self.name = str(info["name"])
        self.model = RemoteModel(self, LockstepSpec(*info["spec"]))
        self.period_s = self.model.spec.frame_ms / 1000.0
        self.frame_bytes = 2 * self.model.spec.frame_samples
        #: This process's members, by key.
        self.members: dict[str, RemoteMember] = {}
        self.step_cost_s: float | None = None
        self.missed_frames = 0
        self.steps = 0
        self.failures = 0
        self.error = ""
        self.failed_at = 0.0
        #: The poll loop, running while this process has a live member.
        self.poller: asyncio.Task[None] | None = None
        self._tasks = TaskSet()

    async def join(self, session_id: str, seed: int = 0) -> RemoteMember:
        """A seat at the cluster's clock (``CapacityExceeded``, ``realtime_capacity``, when its pool
        or its step time is full; ``LockstepServiceUnavailable`` when the service cannot answer)."""
        try:
            if self.is_lost and self._find is not None:  # restarting: the same; gone: made again
                self.actor, self.is_lost = await asyncio.to_thread(self._find), False
            answer = await self.actor.join.remote(session_id, seed)
        except Exception as exc:
            self.is_lost = True
            raise self.failure(exc) from exc
        if "refused" in answer:
            raise CapacityExceeded(f"{answer['refused']}", code="realtime_capacity")
        member = RemoteMember(self, answer["key"], session_id, answer["slot"])
        self.members[member.key] = member
        if self.poller is None or self.poller.done():
            self.poller = self._tasks.spawn(self._poll(), name="livegen-lockstep-poll")
        return member

    async def leave(self, member: RemoteMember) -> None:
        """Give the slot back (the service frees it itself if it cannot be told)."""
        if self.members.pop(member.key, None) is None:
            return
        try:
            async with asyncio.timeout(LEAVE_TIMEOUT_S):
                await self.actor.leave.remote(member.key)
        except Exception as exc:  # a lost service has no slot to free
            log_event(logger, "lockstep.leave_failed", logging.WARNING, member=member.key, error=repr(exc))

    async def stop(self) -> None:
        for member in list(self.members.values()):
            await self.leave(member)
        await self._tasks.aclose()

    async def _poll(self) -> None:
        """The members' long poll, one at a time, while one of them is live."""
        while keys := [key for key, member in self.members.items() if not member.is_failed]:
            try:
                answer = await self.actor.poll.remote(keys, POLL_S)
            except Exception as exc:
                error = self.failure(exc)
                for lost in [self.members[k] for k in keys if k in self.members]:
                    lost.deliver(error)
                return
            clock = answer["clock"]
            self.step_cost_s, self.missed_frames = clock["step_cost_s"], clock["missed_frames"]
            self.steps = clock["steps"]
            for key, got in answer["members"].items():
                if (member := self.members.get(key)) is not None:
                    self._deliver(member, got)

    def _deliver(self, member: RemoteMember, got: dict[str, Any] | None) -> None:
        if got is None:  # the service no longer knows it
            member.deliver(self.failure(None))
            return
        member.late_frames = got["late_frames"]
        for frame in got["frames"]:
            member.deliver(frame if isinstance(frame, LockstepFrame) else ModelError(frame))

    def failure(self, exc: Exception | None) -> LockstepServiceUnavailable:
        """The error a session sees when the service failed a call (``exc``) or no longer knows its
        member (None: Ray restarted it, or it freed the member as its process's)."""
        why = (
            "no longer holds this session (it was restarted)"
            if exc is None
            else f"failed: {type(exc).__name__}: {str(exc)[:300]}"
        )
        reason = f"the cluster's lockstep service ({self.name}) {why}; this session's state was lost"
        self.failures += 1
        self.error, self.failed_at = reason, time.time()
        return LockstepServiceUnavailable(reason)


__all__ = ["NAME_PREFIX", "LockstepService", "RemoteClock", "RemoteMember", "connect"]
