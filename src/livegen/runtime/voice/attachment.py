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

Each write runs as its own task (of the attachment's ``TaskSet``, awaited by
``send`` on every path) so that ``detach`` can abort it: a socket
whose peer stopped reading blocks its write until TCP gives up (tens of
seconds), and a resume must not wait for that (it waits for the lock the
blocked write holds). A client that acknowledges events (the duplex dialect's
``session.event_ack``) lets the journal drop them early.

``ResumeCredential`` is the session's resume token: a resume *claims* it in
one synchronous step (no ``await`` between the check and the claim), so of two
concurrent resumes with the same token exactly one wins; the winner gets a new
token, and a claim whose take-over failed is given back.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from livegen.tasks import TaskSet

#: A coroutine function (not any awaitable): each write runs as a task of its own.
SendText = Callable[[str], Coroutine[Any, Any, None]]

#: About 30 s of 24 kHz PCM16 audio deltas (the default grace period), plus the events around them.
DEFAULT_JOURNAL_BYTES = 2 * 1024 * 1024


class JournalGap(Exception):
    """The journal no longer holds the events after the client's last ``seq``."""


def new_token() -> str:
    return secrets.token_urlsafe(24)


class ResumeCredential:
    """A single-use resume token: claimed atomically, rotated on success, given back on failure."""

    def __init__(self) -> None:
        self._token: str | None = new_token()
        #: The token of the claim in progress, to give back if its take-over fails.
        self._claimed: str | None = None

    @property
    def token(self) -> str | None:
        """The token a client may present now (None while a claim is in progress)."""
        return self._token

    def matches(self, token: str) -> bool:
        """Whether ``token`` is the current one (nothing claimed: a transport's early check)."""
        current = self._token
        # Compared against a random string when there is none, so that the time taken says nothing.
        matches = hmac.compare_digest((current or new_token()).encode(), token.encode())
        return current is not None and matches

    def claim(self, token: str) -> bool:
        """Whether ``token`` is the current one; if so it is void from now on (single use)."""
        if not self.matches(token):
            return False
        self._token, self._claimed = None, self._token
        return True

    def settle(self, token: str) -> None:
        """The claim succeeded: ``token`` (sent to the new connection) is the one from now on."""
        self._claimed = None
        self._token = token

    def give_back(self) -> None:
        """The claim's take-over failed: its token is valid again (the session stays resumable)."""
        if self._claimed is not None and self._token is None:
            self._token = self._claimed
        self._claimed = None


class Attachment:
    def __init__(
        self, send: SendText | None, journal_bytes: int = DEFAULT_JOURNAL_BYTES, *, stamp_seq: bool = False
    ) -> None:
        self._send: SendText | None = send
        self._journal: deque[str] = deque()
        self._journal_bytes = 0
        self._max_bytes = journal_bytes
        #: Write each event's seq into it as ``server_event_seq`` (the duplex dialect numbers events).
        self._stamp_seq = stamp_seq
        #: seq of the last event sent, and of the oldest event the journal still holds.
        self.seq = 0
        self._first_seq = 1
        self._lock = asyncio.Lock()
        self._write: asyncio.Future[None] | None = None
        self._writes = TaskSet()

    @property
    def is_attached(self) -> bool:
        return self._send is not None

    @property
    def oldest_seq(self) -> int:
        """The seq of the oldest event the journal holds (``seq + 1`` when it holds none)."""
        return self._first_seq

    @property
    def journal_bytes(self) -> int:
        return self._journal_bytes

    async def send(self, text: str) -> None:
        """Number, journal and (when a socket is attached) write one event. A write that fails
        or is aborted detaches the socket; the event stays in the journal for a resume."""
        async with self._lock:
            self.seq += 1
            if self._stamp_seq:
                # Every server event is a JSON object: its seq goes in before the closing brace.
                text = f'{text[:-1]},"server_event_seq":{self.seq}}}'
            self._remember(text)
            if self._send is None:
                return
            write = self._writes.spawn(self._send(text))
            self._write = write
            try:
                await asyncio.wait({write})
            finally:
                self._write = None
                if not write.done():  # we were cancelled ourselves: the write goes with us
                    write.cancel()
                    await asyncio.wait({write})
            if write.cancelled() or write.exception() is not None:
                self._send = None

    def detach(self) -> None:
        """Stop writing to the socket, aborting a write in progress (its peer may never read)."""
        self._send = None
        if self._write is not None:
            self._write.cancel()

    def acknowledge(self, seq: int) -> None:
        """The client has every event up to ``seq``: the journal may forget them."""
        if not 0 <= seq <= self.seq:
            raise ValueError(f"server_event_seq {seq} is outside 0..{self.seq}")
        while self._journal and self._first_seq <= seq:
            self._journal_bytes -= len(self._journal.popleft())
            self._first_seq += 1

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
