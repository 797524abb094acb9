"""Where a voice session's events go: the client's current socket, and a journal for resuming.

A session outlives its socket for a grace period (``session.resume``): the
runner keeps sending to its ``Attachment``, which numbers every event (the
``seq`` of an event is its 1-based position in the session's stream), keeps
the most recent ones in a bounded journal, and writes them to the socket when
one is attached. A client that lost its socket reconnects and names the last
``seq`` it received; ``attach`` replays what came after from the journal, then
goes live, under one lock so that no event can slip between the replay and
the live stream or arrive twice. If the journal no longer reaches back that
far, ``attach`` refuses rather than hand over a stream with a hole in it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

SendText = Callable[[str], Awaitable[None]]

#: About 30 s of 24 kHz PCM16 audio deltas (the default grace period), plus the events around them.
DEFAULT_JOURNAL_BYTES = 2 * 1024 * 1024


class JournalGap(Exception):
    """The journal no longer holds the events after the client's last ``seq``."""


class Attachment:
    def __init__(self, send: SendText | None, journal_bytes: int = DEFAULT_JOURNAL_BYTES) -> None:
        self._send: SendText | None = send
        self._journal: deque[str] = deque()
        self._journal_bytes = 0
        self._max_bytes = journal_bytes
        #: seq of the last event sent, and of the oldest event the journal still holds.
        self.seq = 0
        self._first_seq = 1
        self._lock = asyncio.Lock()

    @property
    def is_attached(self) -> bool:
        return self._send is not None

    async def send(self, text: str) -> None:
        """Number, journal and (when a socket is attached) write one event. A write that fails
        detaches the socket; the event stays in the journal for a resume."""
        async with self._lock:
            self.seq += 1
            self._remember(text)
            if self._send is None:
                return
            try:
                await self._send(text)
            except Exception:
                self._send = None

    def detach(self) -> None:
        self._send = None

    async def attach(self, send: SendText, last_seq: int, greeting: str) -> int:
        """Send ``greeting``, then every event after ``last_seq``, then go live on ``send``.
        Returns how many events were replayed; raises ``JournalGap`` (nothing sent) if some are
        gone, or ``ValueError`` for a ``last_seq`` the session never sent."""
        async with self._lock:
            if last_seq > self.seq or last_seq < 0:
                raise ValueError(f"last_event_seq {last_seq} is outside 0..{self.seq}")
            if last_seq + 1 < self._first_seq:
                raise JournalGap(
                    f"events {last_seq + 1}..{self._first_seq - 1} are no longer held (journal limit)"
                )
            skip = last_seq + 1 - self._first_seq
            replay = list(self._journal)[skip:]
            await send(greeting)
            for text in replay:
                await send(text)
            self._send = send
            return len(replay)

    def _remember(self, text: str) -> None:
        self._journal.append(text)
        self._journal_bytes += len(text)
        while self._journal_bytes > self._max_bytes and len(self._journal) > 1:
            self._journal_bytes -= len(self._journal.popleft())
            self._first_seq += 1
