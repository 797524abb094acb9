"""Fuzzing both codecs with the families that once ended sessions (issue 18, items 5, 6 and 10).

Deep nesting, a wrong type in every field (generated from the event structs and
the shapes of their nested objects), huge integers, binary and invalid UTF-8
messages. Each must come out as an event or a typed ``InvalidRequest`` with a
code the client can act on; and every voice event that decodes must be taken by
the session core without any exception but our typed ones (a wrong type that
slips through decoding would end the session in the core).
"""

from __future__ import annotations

import contextlib
import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from livegen.bench.fuzz_cases import MINIMAL, ODD_VALUES, fits, nested, param, voice_fields, with_value
from livegen.errors import InvalidRequest, RemoteProtocolError
from livegen.protocol import realtime as wire
from livegen.protocol import world
from livegen.voice.session import ModelFacts, Session

VOICE_CODES = {
    "invalid_json",
    "invalid_event",
    "unknown_event_type",
    "invalid_type",
    "invalid_value",
    "missing_required_parameter",
}
WORLD_CODES = {"invalid_json", "invalid_request", "invalid_event", "unknown_event_type", "message_too_large"}

VOICE_FIELDS = voice_fields()
_with_value, _param, _fits, _nested = with_value, param, fits, nested


def _core() -> Session:
    counter = itertools.count()
    return Session("sess_fuzz", ModelFacts("m", 24_000, 24_000, False), lambda p: f"{p}_{next(counter)}")


def _decode_voice(text: str | bytes) -> wire.ClientEvent | None:
    """Decode; a failure must be typed with a known code (then None)."""
    try:
        return wire.decode(text)
    except InvalidRequest as error:
        assert error.code in VOICE_CODES, error.code
        return None


def test_the_fuzzer_reaches_the_fields_that_broke_sessions() -> None:
    params = {(kind, _param(path)) for kind, path, _ in VOICE_FIELDS}
    assert ("conversation.item.create", "item.role") in params
    assert ("session.update", "session.audio.input.turn_detection.eagerness") in params
    assert ("session.update", "session.turn_detection.idle_timeout_ms") in params
    assert ("playback.ack", "played_ms") in params
    assert ("conversation.item.create", "item.content[0].text") in params


@given(field=st.sampled_from(VOICE_FIELDS), value=st.sampled_from(ODD_VALUES), event_id=st.booleans())
def test_a_wrong_type_in_any_voice_field_is_refused_with_its_param(
    field: tuple[str, tuple[str, ...], Any], value: Any, event_id: bool
) -> None:
    kind, path, annotation = field
    event_id = event_id and path != ("event_id",)
    body = _with_value(MINIMAL[kind], path, value)
    text = json.dumps({"type": kind, **body, **({"event_id": "evt_f"} if event_id else {})})
    if _fits(value, annotation):
        event = _decode_voice(text)
        if event is not None:  # what decodes, the core takes or refuses with a typed error
            with contextlib.suppress(RemoteProtocolError):
                _core().receive(event, 0.0)
        return
    with pytest.raises(InvalidRequest) as caught:
        wire.decode(text)
    assert caught.value.code in {"invalid_type", "invalid_value", "invalid_json"}
    if caught.value.code != "invalid_json":  # 10**400 inside Any-typed JSON: out of the parser's range
        assert (caught.value.param or "").startswith(_param(path))
    assert caught.value.event_id == ("evt_f" if event_id else None)


def _nested(depth: int, kind: str) -> str:
    opening, closing = ("[", "]") if kind == "array" else ('{"a":', "}")
    return opening * depth + "1" + closing * depth


@given(
    depth=st.integers(1, 20_000),
    kind=st.sampled_from(["array", "object"]),
    where=st.sampled_from(["top", "session", "item", "response", "unknown", "event_id"]),
)
def test_any_nesting_depth_is_an_event_or_a_typed_error(depth: int, kind: str, where: str) -> None:
    inner = _nested(depth, kind)
    field = {"top": None, "session": "session", "item": "item", "response": "response"}.get(where, where)
    text = inner if field is None else f'{{"type":"session.update","{field}":{inner},"session":{{}}}}'
    _decode_voice(text)
    with contextlib.suppress(InvalidRequest):
        world.decode_client(
            inner if field is None else f'{{"type":"world.event","event_id":1,"{field}":{inner}}}'
        )


def test_nesting_past_the_parser_limit_is_invalid_json_on_both_endpoints() -> None:
    deep = _nested(5_000, "object")
    with pytest.raises(InvalidRequest) as voice:
        wire.decode(f'{{"type":"session.update","event_id":"e","session":{{"tools":[{deep}]}}}}')
    assert voice.value.code == "invalid_json"
    for text in (deep, f'{{"type":"session.update","session":{{"x":{deep}}}}}'):
        with pytest.raises(InvalidRequest) as caught:
            world.decode_client(text)
        assert caught.value.code in {"invalid_json", "invalid_request"}
    with pytest.raises(InvalidRequest) as controls:
        world.decode_client(
            '{"type":"world.event","event_id":1,"controls":[{"track":"a","schema":"s","data":' + deep + "}]}"
        )
    assert controls.value.code == "invalid_json"


@given(digits=st.integers(19, 5_000), sign=st.sampled_from(["", "-"]), field=st.sampled_from(VOICE_FIELDS))
def test_huge_integers_anywhere_are_typed(
    digits: int, sign: str, field: tuple[str, tuple[str, ...], Any]
) -> None:
    kind, path, _ = field
    marker = "__huge__"
    text = json.dumps({"type": kind, **_with_value(MINIMAL[kind], path, marker)})
    event = _decode_voice(text.replace(f'"{marker}"', sign + "9" * digits))
    if event is not None:
        with contextlib.suppress(RemoteProtocolError):
            _core().receive(event, 0.0)


@given(data=st.binary(max_size=256))
def test_binary_and_invalid_utf8_are_typed_on_both_endpoints(data: bytes) -> None:
    _decode_voice(data)
    with pytest.raises(InvalidRequest) as binary:
        wire.decode_message({"type": "websocket.receive", "bytes": data})
    assert binary.value.code == "invalid_event"
    with contextlib.suppress(InvalidRequest):
        world.decode_client(data)


def test_the_values_that_ended_sessions_are_refused_by_name() -> None:
    cases = [
        ({"type": "conversation.item.create", "item": {"role": []}}, "invalid_type", "item.role"),
        (
            {
                "type": "session.update",
                "session": {"turn_detection": {"type": "semantic_vad", "eagerness": []}},
            },
            "invalid_type",
            "session.turn_detection.eagerness",
        ),
        ({"type": "playback.ack", "response_id": "r", "played_ms": 10**400}, "invalid_value", "played_ms"),
        (
            {
                "type": "session.update",
                "session": {"audio": {"input": {"turn_detection": {"idle_timeout_ms": -1}}}},
            },
            "invalid_value",
            "session.audio.input.turn_detection.idle_timeout_ms",
        ),
        (
            {"type": "session.update", "session": {"turn_detection": {"idle_timeout_ms": 10**400}}},
            "invalid_value",
            "session.turn_detection.idle_timeout_ms",
        ),
    ]
    for event, code, where in cases:
        with pytest.raises(InvalidRequest) as caught:
            wire.decode(json.dumps(event))
        assert (caught.value.code, caught.value.param) == (code, where), event
