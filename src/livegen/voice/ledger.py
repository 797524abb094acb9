"""The two ledgers of a voice session: input bytes reserved, and audio played.

``InputLedger`` is the exact reservation ledger of promises V3 and V5
(docs/architecture.md). Every accepted append reserves its decoded bytes against the session's
budget before it joins the append chain; the reservation is committed when the
model took the audio and rolled back when it never will (a failed chain, a
clear, a close). Commits are head-only because the chain runs in wire order;
rolling one back also rolls back every later one, because audio after a hole
must not reach the model out of order. Both are idempotent, so whichever of
the chain or a canceller gets there first settles a reservation and the other
is a no-op. The pending total is never negative and is zero when idle.

``Playback`` is one response's playback ledger (promise V6): how much audio the
model generated, how much the session released to the client, how much the
client says it played (``playback.ack``), and how much is committed to history.
Text marks map audio time to transcript length, so history can keep exactly
the words that were heard.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum

from livegen.errors import LocalProtocolError
from livegen.protocol.errors import INPUT_AUDIO_BACKPRESSURE


class ReservationState(StrEnum):
    PENDING = "pending"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"


@dataclass(eq=False)
class Reservation:
    seq: int
    num_bytes: int
    state: ReservationState = ReservationState.PENDING


class InputLedger:
    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self.pending_bytes = 0
        self._pending: deque[Reservation] = deque()
        self._next_seq = 0

    def reserve(self, num_bytes: int, *, is_forced: bool = False) -> Reservation:
        """Reserve or refuse at once (the caller's state is untouched on refusal).

        ``is_forced`` takes a few ms of resampler tail at a commit, which must not fail.
        """
        if not is_forced and self.pending_bytes + num_bytes > self.budget_bytes:
            raise INPUT_AUDIO_BACKPRESSURE.error(
                pending=self.pending_bytes, size=num_bytes, budget=self.budget_bytes
            )
        reservation = Reservation(self._next_seq, num_bytes)
        self._next_seq += 1
        self._pending.append(reservation)
        self.pending_bytes += num_bytes
        return reservation

    def resize(self, reservation: Reservation, num_bytes: int) -> None:
        """Swap an estimate for the exact size once the audio is decoded."""
        if reservation.state is ReservationState.PENDING:
            self.pending_bytes += num_bytes - reservation.num_bytes
            reservation.num_bytes = num_bytes

    def commit(self, reservation: Reservation) -> None:
        """The model took this audio. Only the head may commit; a settled one is a no-op."""
        if reservation.state is not ReservationState.PENDING:
            return
        if not self._pending or self._pending[0] is not reservation:
            raise LocalProtocolError(
                "append chain out of order: a reservation committed before its predecessor"
            )
        self._pending.popleft()
        reservation.state = ReservationState.COMMITTED
        self.pending_bytes -= reservation.num_bytes

    def rollback(self, reservation: Reservation) -> list[Reservation]:
        """Give back this reservation and every later one; return those that were pending."""
        if reservation.state is not ReservationState.PENDING:
            return []
        released: list[Reservation] = []
        while self._pending and self._pending[-1].seq >= reservation.seq:
            later = self._pending.pop()
            later.state = ReservationState.ROLLED_BACK
            self.pending_bytes -= later.num_bytes
            released.append(later)
        released.reverse()
        return released

    def clear(self) -> list[Reservation]:
        """Roll back everything pending (input cleared, session closing)."""
        return self.rollback(self._pending[0]) if self._pending else []

    @property
    def num_pending(self) -> int:
        return len(self._pending)


@dataclass
class Playback:
    """One response's audio: generated, sent (released to the client), played, committed ms."""

    response_id: str
    item_id: str
    generated_ms: float = 0.0
    sent_ms: float = 0.0
    played_ms: float = 0.0
    committed_ms: float = 0.0
    is_acked: bool = False
    #: Playback was cut (an interruption): nothing more plays after ``committed_ms``.
    is_stopped: bool = False
    #: When the first audio of the response was released; the client's playback clock.
    started_at: float | None = None
    #: (audio ms generated when the text arrived, transcript length after it).
    marks: list[tuple[float, int]] = field(default_factory=list)

    def ack(self, played_ms: float) -> None:
        """A client report; acks only move forward and never past what was sent."""
        self.is_acked = True
        self.played_ms = max(self.played_ms, min(float(played_ms), self.sent_ms))

    def heard_ms(self, now: float) -> float:
        """What the listener heard: the acked position, else real-time playback of what was sent."""
        if self.is_stopped:
            return self.committed_ms
        if self.is_acked:
            return self.played_ms
        if self.started_at is None:
            return 0.0
        return max(0.0, min(self.sent_ms, (now - self.started_at) * 1000.0))

    def played_until(self, now: float) -> float:
        """When the audio sent so far will have played out (``now`` if none was released)."""
        if self.started_at is None:
            return now
        return max(now, self.started_at + self.sent_ms / 1000.0)

    def is_all_due(self, now: float) -> bool:
        """All audio sent so far has been due at real-time playback since the first was released."""
        return self.started_at is not None and now >= self.started_at + self.sent_ms / 1000.0

    def is_playing(self, now: float) -> bool:
        """Sent audio is still playing at the client.

        Acks only say where playback is while it is due: an answer whose audio has all been
        due at real time has finished, whatever the last ack said (a client acking whole ms,
        or acking less than it played, must not leave it playing forever, to be cut by the
        next utterance).
        """
        if self.is_stopped or self.sent_ms <= 0 or self.is_all_due(now):
            return False
        return self.heard_ms(now) < self.sent_ms

    def stop(self, now: float) -> float:
        """Cut playback where the listener is now; return that position (committed to history)."""
        if not self.is_stopped:
            self.committed_ms = self.heard_ms(now)
            self.is_stopped = True
        return self.committed_ms

    def text_length_at(self, audio_ms: float, full_length: int) -> int:
        """Transcript characters spoken by ``audio_ms``.

        Text that arrived when ``m`` ms of audio had been generated is spoken in
        the audio from ``m`` to the next mark (or the end), evenly: a model that
        sends a sentence's text and then its audio is cut mid-sentence in
        proportion, not after the whole sentence.
        """
        if audio_ms >= self.generated_ms:
            return full_length
        spans: list[tuple[float, int]] = []
        for mark_ms, mark_length in self.marks:
            if spans and spans[-1][0] == mark_ms:
                spans[-1] = (mark_ms, mark_length)
            else:
                spans.append((mark_ms, mark_length))
        length, previous = 0.0, 0
        for index, (start, mark_length) in enumerate(spans):
            if audio_ms <= start:
                break
            end = spans[index + 1][0] if index + 1 < len(spans) else self.generated_ms
            fraction = 1.0 if end <= start else min(1.0, (audio_ms - start) / (end - start))
            length = previous + fraction * (mark_length - previous)
            previous = mark_length
        return min(full_length, int(length))
