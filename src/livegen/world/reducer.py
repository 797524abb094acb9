"""Control reducers: how a chunk's events turn into the control state it runs under.

Two-phase, because a chunk is a transaction: ``prepare`` is speculative and
pure (it may run more than once for one chunk, and its result may be thrown
away), ``commit`` makes the reducer's private state durable only after the
chunk committed, ``reset`` forgets it. The session core owns when each phase
runs (``world/session.py``); a reducer owns what controls mean.

``Blaming`` wraps a reducer so that a chunk's ``prepare`` finds the events that
make it raise and leaves them out, instead of failing every later tick.

``LastWriteWins`` is the default: per track, the last event's value holds,
except for the parts of ``livegen.keys.v1`` and ``livegen.mouse.v1`` that
are events rather than states (taps, motion), which it gathers per chunk.
``livegen.camera.v1`` is a state (a velocity or a pose), so plain
last-write-wins is its meaning: the chunk's last camera value holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import msgspec

from livegen.models.controls import KEYS_V1, MAX_TAPS_PER_CHUNK, MOUSE_V1
from livegen.world.events import Applied, ControlInput, Event, FrozenDict, key


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
    """Each track takes the value of the last event (by id) that set it.

    Two schemas are reduced by meaning instead, because last-write-wins loses
    input there: ``livegen.keys.v1`` keeps the last ``down`` but gathers
    ``taps`` over the chunk's events, and a key pressed and released within
    one chunk (in some event's ``down``, not in the last) becomes a tap;
    ``livegen.mouse.v1`` sums ``dx``, ``dy`` and ``wheel`` over the chunk's
    events (motion is a delta, not a state) and keeps the last ``buttons``.
    Taps, motion and wheel apply to one chunk: the next chunk starts them at
    zero. Everything here is a pure function of its arguments, so the reducer
    needs no private state and ``prepare`` can run any number of times.

    ``prepare`` runs on the event loop for every chunk, so it is linear in the
    codes its events name: a chunk's taps are gathered in one set (at most
    ``MAX_TAPS_PER_CHUNK``, the first distinct ones in event order), never by
    copying a growing list per event.
    """

    def prepare(
        self, current: Mapping[str, ControlInput], events: Sequence[Event], chunk_index: int
    ) -> Prepared:
        controls = {track: _for_next_chunk(control) for track, control in current.items()}
        keys: dict[str, list[ControlInput]] = {}
        for event in events:
            for control in event.controls:
                if control.schema == KEYS_V1 and isinstance(control.data, Mapping):
                    keys.setdefault(control.track, []).append(control)
                else:
                    controls[control.track] = _merge(controls.get(control.track), control)
        for track, given in keys.items():
            controls[track] = _keys_of_chunk(controls.get(track), given)
        return Prepared(controls)

    def commit(self, prepared: Prepared) -> None:
        """Nothing private to keep: the session stores the controls."""

    def reset(self) -> None:
        """Nothing private to forget."""


def _with(control: ControlInput, data: Mapping[str, object]) -> ControlInput:
    return ControlInput(control.track, control.schema, FrozenDict(data))


def _for_next_chunk(control: ControlInput) -> ControlInput:
    """A control as the next chunk inherits it: one-chunk parts back to zero."""
    data = control.data
    if control.schema == KEYS_V1 and isinstance(data, Mapping) and data.get("taps"):
        return _with(control, {**data, "taps": ()})
    if control.schema == MOUSE_V1 and isinstance(data, Mapping) and any(data.get(n) for n in _MOTION):
        return _with(control, {**data, **dict.fromkeys(_MOTION, 0)})
    return control


def _keys_of_chunk(previous: ControlInput | None, given: Sequence[ControlInput]) -> ControlInput:
    """A chunk's ``livegen.keys.v1`` value from its events' (in order): the last ``down``, and as
    taps every code tapped, or held by some event but not by the last, in one linear pass."""
    old = previous.data if previous is not None and previous.schema == KEYS_V1 else None
    down: Sequence[str] = old.get("down", ()) if isinstance(old, Mapping) else ()
    for control in given:
        down = control.data.get("down", down)
    held = set(down)
    taps: dict[str, None] = {}  # insertion-ordered: the first distinct codes are the ones kept
    for control in given:
        for codes in (control.data.get("down", ()), control.data.get("taps", ())):
            for code in codes:
                if code not in held and code not in taps:
                    if len(taps) == MAX_TAPS_PER_CHUNK:
                        return _with(given[-1], {"down": down, "taps": tuple(sorted(taps))})
                    taps[code] = None
    return _with(given[-1], {"down": down, "taps": tuple(sorted(taps))})


def _merge(previous: ControlInput | None, control: ControlInput) -> ControlInput:
    data = control.data
    if previous is None or previous.schema != control.schema or not isinstance(data, Mapping):
        return control
    if control.schema == MOUSE_V1:
        old = previous.data
        merged = {name: old.get(name, 0) + data.get(name, 0) for name in _MOTION}
        merged["buttons"] = data.get("buttons", old.get("buttons", 0))
        return _with(control, merged)
    return control


_MOTION = ("dx", "dy", "wheel")


class Blaming:
    """A reducer whose ``prepare`` blames the events that make it raise, and leaves them out.

    Upstream gap 1: a reducer that raised in ``prepare`` left its event in
    the queue, failing every later tick. ``prepare`` is speculative, so
    trying each event alone is safe; the ones that fail alone are refused
    (or all of them, when only their combination fails).
    """

    def __init__(self, reducer: Reducer) -> None:
        self.reducer = reducer

    def prepare(
        self, current: Mapping[str, ControlInput], events: Sequence[Event], chunk_index: int
    ) -> tuple[Prepared, tuple[Applied, ...]]:
        """The chunk's controls, and the events refused (empty when every event reduced)."""
        try:
            return self.reducer.prepare(current, events, chunk_index), ()
        except Exception:
            pass
        refused = tuple(
            key(event) for event in events if not self._prepares_alone(current, event, chunk_index)
        )
        kept = [event for event in events if key(event) not in refused] if refused else []
        refused = refused or tuple(key(event) for event in events)
        try:
            return self.reducer.prepare(current, kept, chunk_index), refused
        except Exception:
            return Prepared(current), tuple(key(event) for event in events)

    def _prepares_alone(self, current: Mapping[str, ControlInput], event: Event, chunk_index: int) -> bool:
        try:
            self.reducer.prepare(current, [event], chunk_index)
        except Exception:
            return False
        return True
