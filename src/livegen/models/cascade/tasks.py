"""Tasks with an owner: none of the cascade's is left to the garbage collector.

Every task the cascade starts is owned by something that awaits it, or cancels it and waits
until it has ended, on every path: a session's stream holds its tasks in a ``TaskSet`` that its
``aclose`` cancels and awaits (tasks started meanwhile too); a reader, a producer or a decode
that one call starts is ended by that call with ``cancelled`` before it returns or raises. So a
cancelled response leaves nothing running once it has ended, a closed stream leaves nothing at
all, and no "Task was destroyed but it is pending" can happen when a loop stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class TaskSet:
    """An owner's tasks, each held until it ends; ``aclose`` cancels and awaits those left."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def __len__(self) -> int:
        return len(self._tasks)

    async def aclose(self) -> None:
        """Cancel every task and wait until each has ended, those they start meanwhile too."""
        while self._tasks:
            await cancelled(*self._tasks)


async def cancelled(*tasks: asyncio.Future[Any]) -> None:
    """Cancel ``tasks`` and wait until each has ended; what they raised is theirs, retrieved here
    (never logged as not retrieved). Cancelled meanwhile, this still waits for them, then raises."""
    for task in tasks:
        task.cancel()
    pending = set(tasks)
    interrupted = False
    while pending:
        try:
            _, pending = await asyncio.wait(pending)
        except asyncio.CancelledError:
            interrupted = True
    for task in tasks:
        if not task.cancelled():
            task.exception()
    if interrupted:
        raise asyncio.CancelledError
