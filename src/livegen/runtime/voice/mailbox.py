"""``Mailbox``: a FIFO with one consumer, for the voice runner's hot path.

Every audio append crosses two queues (reader -> runner, runner -> chain), so
a queue's cost per item is paid tens of thousands of times a second on a busy
core (its settlement skips the mailbox: ``Runner._settle_taken``). ``asyncio.Queue`` serves any number
of consumers and tracks unfinished tasks; this queue serves exactly one consumer
and does only what the runner needs:

- ``put`` waits while the mailbox is full (the backpressure on one client),
  waking putters in the order they came; ``put_nowait`` raises ``QueueFull``;
- ``wait`` returns once an item is waiting or a time has passed. It never
  takes an item, so cancelling it (or waking at the time) can never lose one; the
  consumer then takes items with ``get_nowait``.

The producers and the consumer all run on one event loop (no threads).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Mailbox(Generic[T]):
    __slots__ = ("_getter", "_items", "_maxsize", "_putters")

    def __init__(self, maxsize: int = 0) -> None:
        """``maxsize`` 0 is unbounded."""
        self._items: deque[T] = deque()
        self._maxsize = maxsize
        self._getter: asyncio.Future[None] | None = None
        self._putters: deque[asyncio.Future[None]] = deque()

    def __len__(self) -> int:
        return len(self._items)

    def empty(self) -> bool:
        return not self._items

    def full(self) -> bool:
        return 0 < self._maxsize <= len(self._items)

    def put_nowait(self, item: T) -> None:
        if 0 < self._maxsize <= len(self._items):
            raise asyncio.QueueFull
        self._items.append(item)
        getter = self._getter
        if getter is not None:
            self._getter = None
            _wake(getter)

    async def put(self, item: T) -> None:
        """Add ``item``, waiting while the mailbox is full (``asyncio.Queue.put``'s protocol)."""
        while self.full():
            putter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._putters.append(putter)
            try:
                await putter
            except BaseException:
                putter.cancel()
                with contextlib.suppress(ValueError):
                    self._putters.remove(putter)
                if not self.full() and not putter.cancelled():  # woken, then cancelled: pass the turn on
                    self._wake_putter()
                raise
        self.put_nowait(item)

    def get_nowait(self) -> T:
        if not self._items:
            raise asyncio.QueueEmpty
        item = self._items.popleft()
        self._wake_putter()
        return item

    async def get(self) -> T:
        while not self._items:
            await self.wait(None)
        return self.get_nowait()

    async def wait(self, seconds: float | None) -> None:
        """Return when an item is waiting, or after ``seconds`` seconds (``None``: no limit)."""
        if self._items:
            return
        if self._getter is not None:
            raise RuntimeError("a Mailbox has one consumer")
        loop = asyncio.get_running_loop()
        getter = self._getter = loop.create_future()
        timer = None if seconds is None else loop.call_later(seconds, _wake, getter)
        try:
            await getter
        finally:
            if self._getter is getter:
                self._getter = None
            if timer is not None:
                timer.cancel()

    def _wake_putter(self) -> None:
        while self._putters:
            putter = self._putters.popleft()
            if not putter.done():
                putter.set_result(None)
                return
