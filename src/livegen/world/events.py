"""Client inputs of a world session as the core sees them: controls and events.

A ``ControlInput`` is one value for one control track; its JSON ``data`` is
deep-frozen on entry (dicts become ``FrozenDict``, lists tuples) so that no
caller can change an accepted event behind the session's back, and so that
values compare and hash by content. Both are frozen msgspec structs: they are
built once per client event, and a struct is several times cheaper to build
than a frozen dataclass (``livegen bench world-session`` measures the path).
An ``Event`` carries a client-chosen integer id, an optional prompt and at most one control per track, and
the player who sent it; it must change something. Both raise ``InvalidRequest`` on bad input, naming the
client's event id, before any session state is touched.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from livegen.errors import InvalidRequest

#: A JSON value after freezing: only immutable types.
Frozen = Any


class FrozenDict(dict[str, Frozen]):
    """An immutable, hashable JSON object.

    A ``dict`` subclass rather than a ``Mapping``: lookups, iteration and JSON
    encoding stay at C speed on the event path; every mutator raises.
    """

    __slots__ = ("_hash",)

    def __hash__(self) -> int:  # type: ignore[override]
        try:
            return self._hash
        except AttributeError:
            self._hash: int = hash(frozenset(self.items()))
            return self._hash

    def _immutable(self, *args: object, **kwargs: object) -> None:
        raise TypeError("FrozenDict is immutable")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _immutable  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"

    def thaw(self) -> dict[str, Any]:
        return {key: thaw(value) for key, value in self.items()}


_SCALARS = (type(None), bool, str)
#: Integers beyond this (2**53, the range a double and JavaScript hold exactly) are refused: JSON
#: carries integers of any size, and one no float can hold (``1`` and 400 zeros) fails any model
#: that computes with it, in a batched step every session shares.
MAX_INTEGER = 2**53


def freeze(value: Any, *, path: str = "data") -> Frozen:
    """Deep-freeze a JSON value; anything that is not JSON, or not finite and bounded, raises
    ``InvalidRequest``."""
    if type(value) in _SCALARS or isinstance(value, _SCALARS):
        return value
    if isinstance(value, int):
        if -MAX_INTEGER <= value <= MAX_INTEGER:
            return value
        raise InvalidRequest(
            f"{path} is an integer of {value.bit_length()} bits; control values are within +-2**53",
            code="invalid_event",
        )
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidRequest(f"{path} is {value}, which JSON cannot carry", code="invalid_event")
        return value
    if type(value) is dict and _is_flat(value):
        return FrozenDict(value)  # the common case: a flat object of scalars
    if isinstance(value, (dict, Mapping)):
        frozen: dict[str, Frozen] = {}
        for key, item in value.items():
            if type(key) is not str:
                raise InvalidRequest(f"{path} has a non-string key {key!r}", code="invalid_event")
            frozen[key] = item if type(item) in _SCALARS else freeze(item, path=f"{path}.{key}")
        return FrozenDict(frozen)
    if isinstance(value, (list, tuple)):
        return tuple(freeze(item, path=f"{path}[{i}]") for i, item in enumerate(value))
    raise InvalidRequest(f"{path} holds a {type(value).__name__}, which is not JSON", code="invalid_event")


def _is_flat(value: dict[Any, Any]) -> bool:
    # A plain loop on purpose: all() over a generator costs more than the whole check.
    for key, item in value.items():
        kind = type(item)
        if type(key) is not str or (
            kind not in _SCALARS and (kind is not int or not -MAX_INTEGER <= item <= MAX_INTEGER)
        ):
            return False
    return True


def thaw(value: Frozen) -> Any:
    """The plain JSON value (dicts and lists) of a frozen one."""
    if isinstance(value, FrozenDict):
        return value.thaw()
    if isinstance(value, tuple):
        return [thaw(item) for item in value]
    return value


class ControlInput(msgspec.Struct, frozen=True):
    """One control value: ``data`` for ``track`` in the versioned ``schema``."""

    track: str
    schema: str
    data: Frozen

    @classmethod
    def of(cls, track: str, schema: str, data: Any) -> ControlInput:
        if type(track) is not str or not track:
            raise InvalidRequest("a control needs a non-empty 'track'", code="invalid_event", param="track")
        if type(schema) is not str or not schema:
            raise InvalidRequest(
                f"control {track!r} needs a non-empty 'schema'", code="invalid_event", param="schema"
            )
        if not isinstance(data, dict) and not isinstance(data, Mapping):
            raise InvalidRequest(
                f"control {track!r}: data must be a JSON object, got {type(data).__name__}",
                code="invalid_event",
                param="data",
            )
        return cls(track, schema, freeze(data, path=f"controls.{track}.data"))


#: Most chunks a prompt transition may take (at 12 frames a chunk and 16 fps, 48 s).
MAX_TRANSITION_CHUNKS = 64


class Event(msgspec.Struct, frozen=True):
    """A client event: a new prompt, new controls, or both. ``prompt=None`` leaves it unchanged.

    ``transition_chunks`` N > 1 asks for the new prompt to blend in over N chunks (0 and 1: at once).
    """

    event_id: int
    prompt: str | None = None
    controls: tuple[ControlInput, ...] = ()
    transition_chunks: int = 0
    #: The player who sent it (``players.py``): 1, the session's owner, unless a player joined.
    player: int = 1

    @classmethod
    def of(
        cls,
        event_id: int,
        prompt: str | None = None,
        controls: Sequence[ControlInput] = (),
        transition_chunks: int = 0,
        player: int = 1,
    ) -> Event:
        """A validated event; raises ``InvalidRequest`` naming ``event_id``."""
        if type(event_id) is not int or event_id < 0:  # bool is not int here, on purpose
            raise InvalidRequest(
                f"event_id must be an integer >= 0, got {event_id!r}", code="invalid_event", param="event_id"
            )
        if transition_chunks:
            _check_transition(event_id, prompt, transition_chunks)
        tracks = [control.track for control in controls]
        repeated = (
            sorted({t for t in tracks if tracks.count(t) > 1}) if len(set(tracks)) < len(tracks) else []
        )
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
        ordered = tuple(controls) if len(controls) < 2 else tuple(sorted(controls, key=lambda c: c.track))
        return cls(event_id, prompt, ordered, transition_chunks, player)


#: (player, event id) of an event: each player of a shared world numbers its own events.
Applied = tuple[int, int]


def key(event: Event) -> Applied:
    """An event's identity in a shared world: its player and its player's id for it."""
    return (event.player, event.event_id)


def _check_transition(event_id: int, prompt: str | None, chunks: int) -> None:
    if type(chunks) is not int or not 0 <= chunks <= MAX_TRANSITION_CHUNKS:
        raise InvalidRequest(
            f"transition_chunks must be an integer from 0 to {MAX_TRANSITION_CHUNKS}, got {chunks!r}",
            code="invalid_event",
            param="transition_chunks",
            event_id=event_id,
        )
    if prompt is None:
        raise InvalidRequest(
            f"event {event_id} asks for a transition without a prompt to transition to",
            code="invalid_event",
            param="transition_chunks",
            event_id=event_id,
        )
