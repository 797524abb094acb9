"""Control reducers: how a chunk's events turn into the control state it runs under.

Two-phase, because a chunk is a transaction: ``prepare`` is speculative and
pure (it may run more than once for one chunk, and its result may be thrown
away), ``commit`` makes the reducer's private state durable only after the
chunk committed, ``reset`` forgets it. The session core owns when each phase
runs (``world/session.py``); a reducer owns what controls mean.

``LastWriteWins`` is the default: per track, the last event's value holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import msgspec

from livegen.world.events import ControlInput, Event


class Prepared(msgspec.Struct, frozen=True):
    """A speculative control snapshot: track -> control, and the reducer's private state."""

    controls: Mapping[str, ControlInput]
    private_state: object = None


class Reducer(Protocol):
    def prepare(
        self, current: Mapping[str, ControlInput], events: Sequence[Event], chunk_index: int
    ) -> Prepared: ...

    def commit(self, prepared: Prepared) -> None: ...

    def reset(self) -> None: ...


class LastWriteWins:
    """Each track takes the value of the last event (by id) that set it."""

    def prepare(
        self, current: Mapping[str, ControlInput], events: Sequence[Event], chunk_index: int
    ) -> Prepared:
        controls = dict(current)
        for event in events:
            for control in event.controls:
                controls[control.track] = control
        return Prepared(controls)

    def commit(self, prepared: Prepared) -> None:
        """Nothing private to keep: the session stores the controls."""

    def reset(self) -> None:
        """Nothing private to forget."""
