"""World placement: which worker's slot holds which session, and where a new rollout goes.

It owns the slots (a worker, its KV pool, the sessions placed on it) and the
session -> slot map; the worker pool (``workers.py``) owns the workers' calls
(steps, releases) and which workers ever held a session's state, and asks here
where a session is. A new session goes to the least loaded live worker with
room; a rollout's first chunk (a new session, or after a reset) needs no
state, so it may move the session to a less loaded one (a tie keeps it where
it is). A session placed with ``place`` (calibration's stand-ins) stays put,
and so does one a cluster's shared service admitted: the service holds it.

What placement needs of a worker is the narrow ``Seat`` (alive or lost) and,
for a shared service, ``SharedSeat`` (full or not, and forgetting a session),
so it imports nothing of ``workers.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar, cast

from livegen.errors import CapacityExceeded, LocalProtocolError
from livegen.runtime.world.kv_pool import Pool


class Seat(Protocol):
    """What placement needs of a worker."""

    #: False once the worker is lost for good (e.g. its process died); it gets no new sessions.
    is_alive: bool


class SharedSeat(Seat, Protocol):
    """What placement needs of a cluster's shared service (``workers.SharedWorker``)."""

    @property
    def is_full(self) -> bool: ...

    def forget(self, session_id: str) -> None: ...


W = TypeVar("W", bound=Seat)


@dataclass
class Slot(Generic[W]):
    """One worker, its KV bookkeeping and the sessions placed on it."""

    worker: W
    kv: Pool | None
    sessions: set[str] = field(default_factory=set)


class Placement(Generic[W]):
    """Places sessions on slots: the least loaded with room, and moves a rollout's first chunk."""

    def __init__(self, slots: list[Slot[W]], *, is_shared: bool) -> None:
        self.slots = slots
        #: The workers are a cluster's shared services: they admit and page sessions themselves.
        self.is_shared = is_shared
        #: Session id -> index of the slot it is placed on (admitted to that slot's KV pool).
        self._placed: dict[str, int] = {}
        #: Sessions placed with ``place``: their first chunk does not move them.
        self._pinned: set[str] = set()

    @property
    def num_sessions(self) -> int:
        return len(self._placed)

    @property
    def is_full(self) -> bool:
        """No live worker can take another session."""
        return not any(self._can_take(slot) for slot in self.slots)

    @staticmethod
    def _can_take(slot: Slot[W]) -> bool:
        if getattr(slot.worker, "is_shared", False):
            return not cast("SharedSeat", slot.worker).is_full
        return slot.worker.is_alive and (slot.kv is None or not slot.kv.is_full)

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._placed

    def get(self, session_id: str) -> int | None:
        """The slot the session is placed on, or None."""
        return self._placed.get(session_id)

    def index(self, session_id: str) -> int:
        try:
            return self._placed[session_id]
        except KeyError:
            raise LocalProtocolError(f"session {session_id!r} is not placed on a worker") from None

    def admit(self, session_id: str) -> None:
        """Place a new session on the least loaded worker (``CapacityExceeded`` when all are full)."""
        self.put(session_id, self._least_loaded(exclude=None))

    def place(self, session_id: str, index: int) -> None:
        """Place a session on worker ``index`` where it stays (calibration's stand-ins)."""
        self.put(session_id, index)
        self._pinned.add(session_id)

    def put(self, session_id: str, index: int) -> None:
        """Place a session on worker ``index`` (a shared service admitted it there)."""
        slot = self.slots[index]
        if slot.kv is not None:
            slot.kv.admit(session_id)
        slot.sessions.add(session_id)
        self._placed[session_id] = index

    def remove(self, session_id: str) -> None:
        """The session left: free its place (and its KV admission)."""
        self._pinned.discard(session_id)
        self._unplace(session_id)

    def _unplace(self, session_id: str) -> None:
        index = self._placed.pop(session_id, None)
        if index is not None:
            slot = self.slots[index]
            slot.sessions.discard(session_id)
            if slot.kv is not None:
                slot.kv.release(session_id)
            if self.is_shared:
                cast("SharedSeat", slot.worker).forget(session_id)

    def for_chunk(self, session_id: str, chunk_index: int) -> int:
        """The worker the session's next tick goes to: a rollout's first chunk holds no state
        anywhere, so it may move to a less loaded worker (not where a service admitted it, nor
        where it was placed to stay)."""
        if chunk_index != 0 or self.is_shared or session_id in self._pinned:
            return self.index(session_id)
        current = self.index(session_id)
        target = self._least_loaded(exclude=current)
        if target != current:
            self._unplace(session_id)
            self.put(session_id, target)
        return target

    def _least_loaded(self, exclude: int | None) -> int:
        candidates = [
            index
            for index, slot in enumerate(self.slots)
            if self._can_take(slot) or (index == exclude and slot.worker.is_alive)
        ]
        if not any(slot.worker.is_alive for slot in self.slots):
            raise CapacityExceeded("no world worker is running; see the server's log", code="no_workers")
        if not candidates:
            pools = [slot.kv for slot in self.slots if slot.kv is not None]
            raise CapacityExceeded(
                f"KV pools full: {len(pools)} workers of {pools[0].capacity} sessions each",
                code="kv_pool_full",
            )
        # A session moving off ``exclude`` frees its place there: count it as gone; on a tie it stays.
        slots = self.slots
        return min(candidates, key=lambda i: (len(slots[i].sessions) - (i == exclude), i != exclude, i))
