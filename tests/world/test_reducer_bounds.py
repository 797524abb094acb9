"""The keys reducer is bounded per chunk and linear in its events' codes (issue 30).

It runs on the event loop for every chunk. Before the fix it copied the
chunk's growing list of taps into a new value for every event: 512 pending
events of 15,000 taps froze the server for 50 s. Linearity is checked by
behaviour, not by timing: the codes the reducer writes into control values,
counted, must not grow faster than the codes its events hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from livegen.models.controls import KEYS_V1, MAX_KEYS_PER_EVENT, MAX_TAPS_PER_CHUNK
from livegen.world import ControlInput, Event, LastWriteWins, reducer

DEFAULT = {"keys": ControlInput.of("keys", KEYS_V1, {"down": [], "taps": []})}


def keys_event(event_id: int, **data: Any) -> Event:
    return Event.of(event_id, controls=[ControlInput.of("keys", KEYS_V1, data)])


def test_a_chunk_applies_at_most_its_bound_of_taps_the_first_distinct_in_event_order() -> None:
    codes = [f"Key{i:03d}" for i in range(3 * MAX_TAPS_PER_CHUNK)]
    events = [
        keys_event(i + 1, taps=codes[i * 16 : (i + 1) * 16], down=["Held"]) for i in range(len(codes) // 16)
    ]
    keys = LastWriteWins().prepare(DEFAULT, events, 1).controls["keys"].data
    assert keys["down"] == ("Held",)
    assert keys["taps"] == tuple(sorted(codes[:MAX_TAPS_PER_CHUNK])), "the first distinct taps, sorted"


def test_the_bound_keeps_the_meaning_of_taps() -> None:
    events = [
        keys_event(1, down=["KeyW"]),  # pressed ...
        keys_event(2, down=[], taps=["KeyA", "KeyA"]),  # ... and released within the chunk: a tap
        keys_event(3, down=["KeyD"], taps=["KeyD"]),  # held at the end: not a tap
    ]
    chunk = LastWriteWins().prepare(DEFAULT, events, 1).controls
    assert (chunk["keys"].data["down"], chunk["keys"].data["taps"]) == (("KeyD",), ("KeyA", "KeyW"))
    after = LastWriteWins().prepare(chunk, [], 2)
    assert after.controls["keys"].data == {"down": ("KeyD",), "taps": ()}, "taps act in one chunk only"


@pytest.mark.parametrize("num_events", [64, 512])
def test_reducing_a_chunk_writes_no_more_codes_than_its_events_hold(
    num_events: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = 0
    real = reducer._with

    def counting(control: ControlInput, data: Mapping[str, object]) -> ControlInput:
        nonlocal written
        written += sum(len(v) for v in data.values() if isinstance(v, tuple))  # type: ignore[arg-type]
        return real(control, data)

    monkeypatch.setattr(reducer, "_with", counting)
    taps = [f"K{i}" for i in range(MAX_KEYS_PER_EVENT)]
    events = [keys_event(i + 1, taps=taps) for i in range(num_events)]
    LastWriteWins().prepare(DEFAULT, events, 1)
    held = num_events * MAX_KEYS_PER_EVENT
    assert written <= held, f"wrote {written} codes for events holding {held}: quadratic"
    assert written <= MAX_TAPS_PER_CHUNK + MAX_KEYS_PER_EVENT, "one value per track, bounded"
