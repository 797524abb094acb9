"""Control inputs and events: validated and frozen on entry; the schema check and its compiled form agree."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from livegen.errors import InvalidRequest
from livegen.models.room.game import ACTION_TRACK
from livegen.world import ControlInput, Event, FrozenDict, freeze, thaw
from livegen.world.events import MAX_INTEGER
from livegen.world.schema import compile_schema, problem

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-MAX_INTEGER, MAX_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
RICH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "mode": {"enum": ["a", "b"]},
        "speed": {"type": "number", "minimum": 0, "maximum": 10},
        "keys": {"type": "array", "items": {"type": "string"}},
        "flag": {"type": "boolean"},
    },
    "required": ["mode"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("schema", [dict(ACTION_TRACK.json_schema), RICH_SCHEMA])
@given(
    value=json_values
    | st.fixed_dictionaries(
        {"mode": st.sampled_from(["a", "b", "c"])},
        optional={
            "action": st.sampled_from(["up", "none", "fly"]),
            "speed": st.integers(-2, 12) | st.booleans(),
            "keys": st.lists(st.text(max_size=2) | st.integers(-MAX_INTEGER, MAX_INTEGER), max_size=2),
            "flag": st.booleans() | st.integers(0, 1),
        },
    )
)
def test_compiled_check_agrees_with_the_reference(schema: dict[str, Any], value: Any) -> None:
    frozen = freeze(value)
    assert (compile_schema(schema)(frozen, "data") is None) == (problem(frozen, schema) is None)


def test_action_schema_accepts_exactly_the_five_actions() -> None:
    check = compile_schema(ACTION_TRACK.json_schema)
    for action in ("none", "up", "down", "left", "right"):
        assert check(freeze({"action": action}), "data") is None
    for bad in ({"action": "fly"}, {}, {"action": "up", "extra": 1}, {"action": ["up"]}):
        assert check(freeze(bad), "data")


@given(json_values)
def test_freeze_is_deep_immutable_and_thaws_back(value: Any) -> None:
    frozen = freeze(value)
    assert thaw(frozen) == value
    hash(frozen)


def test_frozen_dicts_refuse_mutation() -> None:
    frozen = freeze({"a": [1, {"b": 2}]})
    assert isinstance(frozen, FrozenDict) and frozen["a"] == (1, FrozenDict({"b": 2}))
    with pytest.raises(TypeError):
        frozen["a"] = 3
    with pytest.raises(TypeError):
        frozen.update(a=1)


@pytest.mark.parametrize("data", [5, "up", None, [1], {"x": float("nan")}, {1: "a"}, {"x": object()}])
def test_control_data_must_be_a_json_object(data: Any) -> None:
    with pytest.raises(InvalidRequest) as error:
        ControlInput.of("action", "livegen.action.v1", data)
    assert error.value.code == "invalid_event"


def test_events_must_change_something_once_per_track() -> None:
    up = ControlInput.of("action", "livegen.action.v1", {"action": "up"})
    with pytest.raises(InvalidRequest) as error:
        Event.of(3, None, [up, up])
    assert error.value.event_id == 3 and "twice" in error.value.message
    with pytest.raises(InvalidRequest):
        Event.of(4)
    for bad_id in (True, -1, 1.0, "1"):
        with pytest.raises(InvalidRequest):
            Event.of(bad_id, "p")  # type: ignore[arg-type]
    source = {"action": "up"}
    event = Event.of(5, None, [ControlInput.of("action", "livegen.action.v1", source)])
    source["action"] = "down"
    assert event.controls[0].data["action"] == "up", "data is copied and frozen on entry"
