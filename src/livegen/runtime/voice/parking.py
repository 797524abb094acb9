"""``ParkingBudget``: the voice sessions parked for a resume, and the budget they share.

A session whose link was lost waits for a resume without a link (*parked*,
``voice/lifecycle.py``). Parked sessions have their own budget, apart from
``--max-sessions`` (which counts live sessions only), so that dropped clients
never lock new ones out: at most ``--max-parked-sessions`` of them, holding at
most ``--max-parked-bytes`` of journal and history. Parking past it ends the
oldest parked sessions first (``make_room`` sets their ``evicted`` event; their
owners end them); a session bigger than the whole byte budget does not park.

A parked session of a lockstep (native duplex) model holds one more thing: its
seat at the model's frame clock, whose slots are few (32). Were parked seats
kept while new sessions are refused ``realtime_capacity``, 32 clients that drop
without a close would lock every new one out for the whole resume grace. So a
new session refused for capacity ends the oldest parked session of its model
and takes its seat (``open_reclaiming``): a parked seat is kept only while no
new session needs it; a live one is never taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

from livegen.errors import CapacityExceeded
from livegen.logs import log_event
from livegen.models.voice import StreamConfig, VoiceModel, VoiceStream
from livegen.runtime.voice.lifecycle import LiveSession

logger = logging.getLogger("livegen.runtime.voice")

#: How long a new session waits for the parked session it ends to give its seat back (its runner
#: ends between two frames of the clock: well under a second).
RECLAIM_WAIT_S = 5.0


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

    async def reclaim(self, holds: Callable[[LiveSession], bool]) -> bool:
        """End the oldest parked session that ``holds`` what a new session was refused for (a
        seat at a full frame clock) and wait until it has let go of it (its runner ended, its
        stream closed); False when no parked session holds it."""
        oldest = next((live for live in self.sessions.values() if holds(live)), None)
        if oldest is None:
            return False
        self.unpark(oldest)
        oldest.evicted.set()  # its owner ends it: the runner closes its stream, the seat is free
        log_event(logger, "voice.parked_seat_reclaimed", session=oldest.runner.session.id)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(RECLAIM_WAIT_S):
                await oldest.runner.done.wait()
        return True


async def open_reclaiming(
    parking: ParkingBudget, model: VoiceModel, name: str, session_id: str, config: StreamConfig
) -> VoiceStream:
    """``model``'s stream for a new session; when its frame clock is full and a parked session of
    this model holds a seat, that one (the oldest) ends for the new one, and the open is tried once
    more (refused ``realtime_capacity`` if still full: live sessions hold every seat)."""
    try:
        return await model.open(session_id, config)
    except CapacityExceeded:
        if not await parking.reclaim(lambda live: live.runner.session.model.name == name):
            raise
    return await model.open(session_id, config)
