"""``Outbox``: the one ordered, bounded path from a session to its client's socket.

Both runners (``voice/runner.py``, ``world/runner.py``) and each world
spectator (``world/spectators.py``) queue what they send here and write it from
one sender task (``send_all``); the outbox decides nothing about the wire, it
only holds items in order and counts them.

Bounds (``Bounds``): a count of items and a count of bytes (each size is the
caller's, given with the item). Both count the item being written: it is
unsent until its write returns. An item passes the byte bound alone in the
outbox whatever its size only where ``lone_item_passes`` says so (the voice
runner's backlog rule).

Overflow is explicit: ``put`` never blocks and never drops on its own; an item
past a bound is refused (``put`` returns False, the outbox is unchanged) and the
caller applies its own policy (the voice runner drops that response's audio or
ends the session; the world runner and a spectator end it). ``put(..., reserve=n)``
lets an item past the count bound by ``n`` more (the voice runner's control
events). ``drop`` and ``clear`` remove queued items, their bytes go at once.

Closing is explicit: after ``close()`` the outbox takes nothing more (``put``
ignores the item: the session is ending) and ``send_all`` returns once it has
written what was queued. A write that raises (the socket is gone) drops
everything queued (nothing after a hole is written) and ``send_all`` raises it;
the caller decides whether to go on. Cancelling the sender's task stops it at
once; ``clear`` then frees what was left.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Bounds:
    """How much an outbox holds; None: that count is not bounded."""

    items: int | None = None
    bytes: int | None = None
    #: An item that finds the outbox empty passes the byte bound whatever its size.
    lone_item_passes: bool = False


class _Entry(Generic[T]):
    __slots__ = ("item", "size")

    def __init__(self, item: T, size: int) -> None:
        self.item = item
        self.size = size


class Outbox(Generic[T]):
    """Items in order for one sender task, bounded in items and bytes (see the module)."""

    __slots__ = ("_closed", "_empty", "_entries", "_ready", "bounds", "num_bytes")

    def __init__(self, bounds: Bounds | None = None) -> None:
        self.bounds = bounds or Bounds()
        self._entries: deque[_Entry[T]] = deque()
        #: Bytes of the items queued and not yet written (the one being written included).
        self.num_bytes = 0
        self._closed = False
        self._ready = asyncio.Event()
        self._empty = asyncio.Event()
        self._empty.set()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def is_closed(self) -> bool:
        return self._closed

    def items(self) -> list[T]:
        """What is queued, oldest first (the item being written included)."""
        return [entry.item for entry in self._entries]

    def fits(self, size: int, *, reserve: int = 0) -> bool:
        """Whether an item of ``size`` bytes would be taken now."""
        bounds = self.bounds
        if bounds.items is not None and len(self._entries) >= bounds.items + reserve:
            return False
        if bounds.bytes is None or (bounds.lone_item_passes and not self._entries):
            return True
        return self.num_bytes + size <= bounds.bytes

    def put(self, item: T, size: int, *, reserve: int = 0) -> bool:
        """Queue ``item`` (``size`` bytes); False, and nothing queued, if it is past a bound.
        After ``close`` the item is ignored (True: nothing is wrong, the session is ending)."""
        if self._closed:
            return True
        if not self.fits(size, reserve=reserve):
            return False
        self._entries.append(_Entry(item, size))
        self.num_bytes += size
        self._empty.clear()
        self._ready.set()
        return True

    def charge(self, delta: int) -> None:
        """The item being written changed size by ``delta`` bytes (encoded, or written in part)."""
        if self._entries:
            self._entries[0].size += delta
            self.num_bytes += delta

    def drop(self, predicate: Callable[[T], bool]) -> int:
        """Remove every queued item ``predicate`` holds for (in place); how many went."""
        entries = self._entries
        kept = [entry for entry in entries if not predicate(entry.item)]
        dropped = len(entries) - len(kept)
        if dropped:
            entries.clear()
            entries.extend(kept)
            self.num_bytes = sum(entry.size for entry in kept)
            self._settle()
        return dropped

    def clear(self) -> list[T]:
        """Remove everything queued (its memory goes now) and return it, oldest first."""
        items = [entry.item for entry in self._entries]
        self._entries.clear()
        self.num_bytes = 0
        self._settle()
        return items

    def close(self) -> None:
        """Take nothing more; ``send_all`` returns once what is queued is written."""
        self._closed = True
        self._ready.set()

    async def drained(self) -> None:
        """Until nothing is queued (every item written, dropped or cleared)."""
        await self._empty.wait()

    async def send_all(self, write: Callable[[T], Awaitable[None]]) -> None:
        """Write the items in order, each after the last one's write returned, until closed and
        empty. A write that raises clears the outbox and raises here."""
        entries = self._entries
        while True:
            if not entries:
                if self._closed:
                    return
                self._ready.clear()
                await self._ready.wait()
                continue
            entry = entries[0]
            try:
                await write(entry.item)
            except Exception:  # cancelled instead: what is queued stays, for the owner to take
                self.clear()
                raise
            if entries and entries[0] is entry:  # unless a drop or clear already took it
                entries.popleft()
                self.num_bytes -= entry.size
                self._settle()

    def _settle(self) -> None:
        if not self._entries:
            self._empty.set()
