"""Every server event the voice core sends encodes to the bytes it always did, GA and beta.

The golden file was recorded from the core that built its events as dicts; the
core now builds typed structs (``protocol/realtime/server.py``). Same names,
same values, same order, same omitted-versus-null fields.
"""

from __future__ import annotations

import json

import pytest

from protocol.realtime_scenario import GOLDEN, events

RECORDED = [json.loads(line) for line in GOLDEN.read_text().splitlines()]
REPLAYED = list(events())


def test_the_scenario_sends_the_recorded_events_in_order() -> None:
    assert [kind for kind, _, _ in REPLAYED] == [row["type"] for row in RECORDED]


@pytest.mark.parametrize("index", range(len(RECORDED)), ids=lambda i: f"{i}-{RECORDED[i]['type']}")
def test_each_event_encodes_byte_for_byte_as_before(index: int) -> None:
    kind, ga, beta = REPLAYED[index]
    assert ga.decode() == RECORDED[index]["ga"], kind
    assert beta.decode() == RECORDED[index]["beta"], kind
