"""``ParkingBudget``: the voice sessions parked for a resume, and the budget they share.

A session whose link was lost waits for a resume without a link (*parked*,
``voice/lifecycle.py``). Parked sessions have their own budget, apart from
``--max-sessions`` (which counts live sessions only), so that dropped clients
never lock new ones out: at most ``--max-parked-sessions`` of them, holding at
most ``--max-parked-bytes`` of journal and history. Parking past it ends the
oldest parked sessions first (``make_room`` sets their ``evicted`` event; their
owners end them); a session bigger than the whole byte budget does not park.
"""

from __future__ import annotations

from typing import Any, Protocol

from livegen.runtime.voice.lifecycle import LiveSession


class ParkingSettings(Protocol):
    @property
    def max_parked_sessions(self) -> int: ...
    @property
    def max_parked_bytes(self) -> int: ...


class ParkingBudget:
    def __init__(self, settings: ParkingSettings, metrics: Any) -> None:
        self.settings = settings
        self.metrics = metrics
        #: Parked sessions by id, oldest first.
        self.sessions: dict[str, LiveSession] = {}

    def __len__(self) -> int:
        return len(self.sessions)

    def held_bytes(self) -> int:
        return sum(live.held_bytes() for live in self.sessions.values())

    def make_room(self, live: LiveSession) -> bool:
        """Whether ``live`` may park: the oldest parked sessions are ended until it fits in the
        budget (count and bytes); one bigger than the whole byte budget does not park."""
        settings = self.settings
        size = live.held_bytes()
        if settings.max_parked_sessions <= 0 or size > settings.max_parked_bytes:
            return False
        total, parked = self.held_bytes(), self.sessions
        for oldest in list(parked.values()):
            if len(parked) < settings.max_parked_sessions and total + size <= settings.max_parked_bytes:
                break
            total -= oldest.held_bytes()
            del parked[oldest.runner.session.id]
            oldest.evicted.set()
        return True

    def park(self, live: LiveSession) -> None:
        self.sessions[live.runner.session.id] = live
        self._gauge()

    def unpark(self, live: LiveSession) -> None:
        """Out of the parked set (it may be out already: an eviction takes it out first)."""
        self.sessions.pop(live.runner.session.id, None)
        self._gauge()

    def _gauge(self) -> None:
        self.metrics.sessions_parked.labels(kind="voice").set(len(self.sessions))
        self.metrics.parked_bytes.labels(kind="voice").set(self.held_bytes())
