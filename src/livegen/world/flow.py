"""Flow control of one world stream: how far generation may run ahead of what the client plays.

The promise (W7, docs/architecture.md and docs/world-protocol.md): nothing is
generated beyond the client's credit. Credit is ``max_chunks_ahead`` chunks
past the last chunk the client acknowledged, and an acknowledgement counts
only for chunks already written to its socket, so a client cannot open credit
by acking what it never read.

A ``chunk.ack`` says when it was sent: ``at: "end"`` (the default, what every
older client means) once the chunk's last frame has been shown, ``at:
"start"`` once its first frame is. Both free the same credit; a start ack
frees it a chunk's playing time sooner, so with one chunk ahead the next
chunk is generated while this one plays instead of after it (no gap on
screen). A start ack also tells the runner when the client's playback of that
chunk began, which it paces the next chunk's start by (``last_start``), so
the next chunk starts as late as it can and still be ready in time, and takes
in the latest input.

Sans-IO: the runner gives it indexes and says when chunks are committed and
written; times are the runner's, passed in and handed back untouched.
"""

from __future__ import annotations

from dataclasses import dataclass

ACK_AT = ("start", "end")


@dataclass
class FlowControl:
    """Credit for one session's chunks (see module docstring)."""

    #: Highest chunk index the client acknowledged (-1: none since the start or a reset).
    acked_through: int = -1
    #: Committed chunks not yet fully written to the socket (acks cannot reach past them).
    unsent: int = 0
    #: (chunk index, time) of the last start ack that moved credit, or None.
    last_start: tuple[int, float] | None = None

    def has_credit(self, next_index: int, max_chunks_ahead: int) -> bool:
        """May chunk ``next_index`` be generated now, ``max_chunks_ahead`` past the last ack?"""
        return next_index - self.acked_through - 1 < max_chunks_ahead

    def committed(self) -> None:
        self.unsent += 1

    def written(self) -> None:
        self.unsent -= 1

    def ack(self, chunk_index: int, next_index: int, at: str = "end", now: float = 0.0) -> bool:
        """Record an ack; True when it moved credit. ``next_index`` is the session's next chunk."""
        if at not in ACK_AT:
            raise ValueError(f"ack at {at!r}: expected one of {ACK_AT}")
        sent_through = next_index - 1 - self.unsent
        acked = min(chunk_index, sent_through)
        if acked <= self.acked_through:
            return False
        self.acked_through = acked
        self.last_start = (acked, now) if at == "start" else None
        return True

    def reset(self) -> None:
        """A reset starts the indexes again at 0; chunks of before it still unsent stay counted."""
        self.acked_through = -1
        self.last_start = None
