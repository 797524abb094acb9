"""Client inputs of a world session as the core sees them: controls and events.

A ``ControlInput`` is one value for one control track; its JSON ``data`` is
deep-frozen on entry (dicts become ``FrozenDict``, lists tuples) so that no
caller can change an accepted event behind the session's back, and so that
values compare and hash by content. An ``Event`` carries a client-chosen
integer id, an optional prompt and at most one control per track; it must
change something. Both raise ``InvalidRequest`` on bad input, naming the
client's event id, before any session state is touched.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from livegen.errors import InvalidRequest

#: A JSON value after freezing: only immutable types.
Frozen = Any


class FrozenDict(Mapping[str, Frozen]):
    """An immutable, hashable JSON object."""

    __slots__ = ("_hash", "_items")

    def __init__(self, items: Mapping[str, Frozen]) -> None:
        self._items = dict(items)
        self._hash: int | None = None

    def __getitem__(self, key: str) -> Frozen:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._items.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenDict):
            return self._items == other._items
        return isinstance(other, Mapping) and self._items == dict(other)

    def __repr__(self) -> str:
        return f"FrozenDict({self._items!r})"

    def thaw(self) -> dict[str, Any]:
        return {key: thaw(value) for key, value in self._items.items()}


def freeze(value: Any, *, path: str = "data") -> Frozen:
    """Deep-freeze a JSON value; anything that is not JSON raises ``InvalidRequest``."""
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidRequest(f"{path} is {value}, which JSON cannot carry", code="invalid_event")
        return value
    if isinstance(value, Mapping):
        frozen: dict[str, Frozen] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidRequest(f"{path} has a non-string key {key!r}", code="invalid_event")
            frozen[key] = freeze(item, path=f"{path}.{key}")
        return FrozenDict(frozen)
    if isinstance(value, (list, tuple)):
        return tuple(freeze(item, path=f"{path}[{i}]") for i, item in enumerate(value))
    raise InvalidRequest(f"{path} holds a {type(value).__name__}, which is not JSON", code="invalid_event")


def thaw(value: Frozen) -> Any:
    """The plain JSON value (dicts and lists) of a frozen one."""
    if isinstance(value, FrozenDict):
        return value.thaw()
    if isinstance(value, tuple):
        return [thaw(item) for item in value]
    return value


@dataclass(frozen=True)
class ControlInput:
    """One control value: ``data`` for ``track`` in the versioned ``schema``."""

    track: str
    schema: str
    data: Frozen

    @classmethod
    def of(cls, track: str, schema: str, data: Any) -> ControlInput:
        if not isinstance(track, str) or not track:
            raise InvalidRequest("a control needs a non-empty 'track'", code="invalid_event", param="track")
        if not isinstance(schema, str) or not schema:
            raise InvalidRequest(
                f"control {track!r} needs a non-empty 'schema'", code="invalid_event", param="schema"
            )
        if not isinstance(data, Mapping):
            raise InvalidRequest(
                f"control {track!r}: data must be a JSON object, got {type(data).__name__}",
                code="invalid_event",
                param="data",
            )
        return cls(track, schema, freeze(data, path=f"controls.{track}.data"))


@dataclass(frozen=True)
class Event:
    """A client event: a new prompt, new controls, or both. ``prompt=None`` leaves it unchanged."""

    event_id: int
    prompt: str | None = None
    controls: tuple[ControlInput, ...] = ()

    @classmethod
    def of(cls, event_id: int, prompt: str | None = None, controls: Sequence[ControlInput] = ()) -> Event:
        """A validated event; raises ``InvalidRequest`` naming ``event_id``."""
        if isinstance(event_id, bool) or not isinstance(event_id, int) or event_id < 0:
            raise InvalidRequest(
                f"event_id must be an integer >= 0, got {event_id!r}", code="invalid_event", param="event_id"
            )
        tracks = [control.track for control in controls]
        repeated = sorted({track for track in tracks if tracks.count(track) > 1})
        if repeated:
            raise InvalidRequest(
                f"event {event_id} sets track {repeated[0]!r} twice; send one control per track",
                code="invalid_event",
                param="controls",
                event_id=event_id,
            )
        if prompt is None and not controls:
            raise InvalidRequest(
                f"event {event_id} changes nothing: give a prompt, controls or both",
                code="invalid_event",
                event_id=event_id,
            )
        return cls(event_id, prompt, tuple(sorted(controls, key=lambda c: c.track)))
