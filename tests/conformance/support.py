"""What every client's conformance module shares: a paced microphone and waiting on events.

``Microphone`` feeds a client the way a real microphone does: 20 ms of 24 kHz
PCM16 every 20 ms, the queued speech first and silence between utterances, so
the server's VAD hears turns as it would from a person. Each client module
gives it that client's own way to send audio.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

RATE = 24_000
CHUNK = 2 * RATE // 50  # 20 ms of PCM16

#: The questions the embedded cascade answers without a language model.
QUESTION = "What is twelve times seven?"
LONG_QUESTION = "What can you do?"  # a long answer, to talk over
INTERRUPTION = "What time is it?"
TEXT_QUESTION = "What is two plus two?"


class Microphone:
    """Streams queued speech, then silence, at real time through ``send`` until stopped."""

    def __init__(self, send: Callable[[bytes], Awaitable[None] | None]) -> None:
        self._send = send
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._task = asyncio.ensure_future(self._run())

    def say(self, pcm: bytes) -> None:
        self._queue.put_nowait(pcm)

    async def _run(self) -> None:
        started = time.perf_counter()
        sent = 0
        pending = b""
        while True:
            if not pending and not self._queue.empty():
                pending = self._queue.get_nowait()
            piece, pending = pending[:CHUNK].ljust(CHUNK, b"\0"), pending[CHUNK:]
            await asyncio.sleep(max(0.0, started + sent * 0.02 - time.perf_counter()))
            result = self._send(piece)
            if result is not None:
                await result
            sent += 1

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task


async def until(condition: Callable[[], Any], within: float = 90.0, what: str = "") -> Any:
    """Wait until ``condition()`` is truthy and return it; fail after ``within`` seconds."""
    deadline = time.perf_counter() + within
    while time.perf_counter() < deadline:
        value = condition()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"not within {within} s: {what or condition}")


def refusals(server: Any, code: str) -> float:
    """How many errors of ``code`` the server has sent (its /metrics counter): proof a case was exercised."""
    pattern = re.compile(rf'^livegen_errors_total{{code="{re.escape(code)}",kind="voice"}} (\S+)$', re.M)
    found = pattern.search(server.app.state.livegen.metrics.render().decode())
    return float(found.group(1)) if found else 0.0
