"""``TaskSet`` and ``cancelled``: every task has an owner that ends it.

``asyncio`` holds only a weak reference to a task: one nobody keeps may be
collected mid-flight, and one nobody cancels outlives whatever started it. So
every task in ``src/livegen`` is spawned through an owner, either an
``asyncio.TaskGroup`` (``create_task``) when the children live inside one
``async with`` block, or a ``TaskSet`` when they outlive the call that starts
them (a runner's sender, a scheduler's steps, an engine's sessions, a cascade
stream's answers, a call's own reader). A set holds each task until it ends,
and ``aclose`` cancels every task still running (those started meanwhile too)
and awaits them all, so the owner's close leaves nothing behind and no "Task
was destroyed but it is pending" can happen when a loop stops. What a child
raises is its owner's to read, or, for a set made with a ``logger``, logged
there (a failure is a bug of that owner alone: a call's listener, say).
``close`` is an owner's last word: the tasks may end on their own for a grace,
the rest are cancelled, and a task spawned after it never runs.
``tests/test_tasks.py`` scans the source for spawns that go around both.

A module of the package's top, beside ``errors``: the runtime and the models
both spawn tasks, and neither may import the other.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class TaskSet:
    """Tasks an owner started; each is held until it ends, ``aclose`` cancels and awaits the rest."""

    __slots__ = ("_is_closed", "_logger", "_tasks")

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._is_closed = False
        #: Where a task's failure is logged; None: the owner reads it (or ``cancelled`` does).
        self._logger = logger

    def spawn(self, coroutine: Coroutine[Any, Any, T], *, name: str | None = None) -> asyncio.Task[T]:
        """Run ``coroutine`` as a task of this set (after ``close``: cancelled before its first step)."""
        task = asyncio.create_task(coroutine, name=name)
        if self._is_closed:
            task.cancel()
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if self._logger is not None and not task.cancelled() and (exc := task.exception()) is not None:
            self._logger.error("task_failed", exc_info=exc, extra={"fields": {"error": repr(exc)}})

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(list(self._tasks))

    async def wait(self) -> None:
        """Until every task has ended on its own (nothing is cancelled)."""
        if self._tasks:
            await asyncio.wait(set(self._tasks))

    async def aclose(self) -> None:
        """Cancel every task and wait until each has ended, those they start meanwhile too."""
        while self._tasks:
            await cancelled(*self._tasks)

    async def close(self, grace_s: float = 0.0) -> None:
        """The owner's end: the tasks may end on their own for up to ``grace_s``, the rest are
        cancelled and awaited; nothing spawned from now on runs."""
        self._is_closed = True
        if self._tasks and grace_s > 0:
            await asyncio.wait(set(self._tasks), timeout=grace_s)
        await self.aclose()


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
