"""The live attempts of one voice session, in wire order: numbering, coalescing, settling.

``chain.py`` says what an attempt is; this module owns the ones still owed to
the model. The session, its listener (appends and commits) and its speaker
(responses) all put attempts here, so the sequence numbers stay in wire order
and one place knows which are live: a canceller settles them here, and the
runtime's report of one already settled is ignored (promise V3). The list
``live`` is one object for the session's whole life, pruned in place, so every
part that holds it sees the same attempts.
"""

from __future__ import annotations

from typing import Any

from livegen.voice.chain import INPUT_KINDS, Attempt, AttemptKind, AttemptState, Effect, Run


class Attempts:
    """The attempts still owed to the model, and whether the model may still change."""

    def __init__(self) -> None:
        self.live: list[Attempt] = []
        self._next_seq = 0
        #: The model may change (session.update) until it has been given input or a request.
        self.is_model_locked = False

    def add(self, kind: AttemptKind, epoch: int, now: float, **fields: Any) -> Attempt:
        """A new attempt at the tail of the chain, of the fence's ``epoch``."""
        if kind is not AttemptKind.UPDATE:
            self.is_model_locked = True
        attempt = Attempt(self._next_seq, kind, epoch, received_at=now, **fields)
        self._next_seq += 1
        self.live.append(attempt)
        return attempt

    def control(self, kind: AttemptKind, epoch: int, now: float, **fields: Any) -> list[Effect]:
        """A cancel, clear or update for the model; one still queued of its kind is brought up to date.

        Coalescing keeps these bounded (one queued per kind) however fast a client sends them,
        and is exact: a queued clear or cancel has nothing of the newer epoch ahead of it, and
        only the newest configuration matters.
        """
        for attempt in self.live:
            if attempt.kind is kind:
                attempt.epoch = epoch
                attempt.config = fields.get("config", attempt.config)
                return []
        return [Run(self.add(kind, epoch, now, **fields))]

    @property
    def num_pending_commits(self) -> int:
        return sum(1 for a in self.live if a.kind is AttemptKind.COMMIT)

    def _prune(self) -> None:
        self.live[:] = [a for a in self.live if a.is_live]

    def cancel_all(self) -> None:
        """Every live attempt is owed nothing any more (the session closed, or its model changes)."""
        for attempt in self.live:
            attempt.move(AttemptState.CANCELLED)
        self.live.clear()

    def cancel_bound(self, response_id: str) -> None:
        """``response_id`` ended, its terminal sent: the attempts bound to it are owed nothing."""
        for attempt in self.live:
            if attempt.response_id == response_id:
                attempt.move(AttemptState.CANCELLED)
        self._prune()

    def cancel_uncommitted(self) -> list[Attempt]:
        """The appends after the last commit, cancelled (an input clear); committed turns stay."""
        last_commit = max((a.seq for a in self.live if a.kind is AttemptKind.COMMIT), default=-1)
        dropped = [a for a in self.live if a.kind is AttemptKind.APPEND and a.seq > last_commit]
        for attempt in dropped:
            attempt.move(AttemptState.CANCELLED)
        self._prune()
        return dropped

    def settle(self, attempt: Attempt, is_ok: bool) -> None:
        """The runtime's report of a live ``attempt``: it is done, or it failed."""
        self.live.remove(attempt)
        attempt.move(AttemptState.DONE if is_ok else AttemptState.FAILED)

    def break_after(self, failed: Attempt) -> list[Attempt]:
        """The input attempts after ``failed``; failed too (wire order) when ``failed`` carried input."""
        later = [a for a in self.live if a.kind in INPUT_KINDS and a.seq > failed.seq]
        if failed.kind in INPUT_KINDS:
            for attempt in later:
                attempt.move(AttemptState.FAILED)
            self._prune()
        return later
