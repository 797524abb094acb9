"""The world codec: every client message decodes to an event or a typed InvalidRequest, nothing else."""

from __future__ import annotations

import contextlib
import json

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from livegen.errors import InvalidRequest
from livegen.protocol import world as wire


def test_decodes_each_client_event() -> None:
    update = wire.decode_client('{"type":"session.update","session":{"seed":3,"pacing":"asap"}}')
    assert isinstance(update, wire.SessionUpdate) and update.session.seed == 3
    event = wire.decode_client(
        '{"type":"world.event","event_id":4,"prompt":"p",'
        '"controls":[{"track":"action","schema":"s.v1","data":{"action":"up"}}]}'
    )
    assert (
        isinstance(event, wire.WorldEvent) and event.controls and event.controls[0].data == {"action": "up"}
    )
    assert wire.decode_client('{"type":"chunk.ack","chunk_index":2}') == wire.ChunkAck(2)
    assert wire.decode_client('{"type":"world.reset"}') == wire.WorldReset()
    assert wire.decode_client('{"type":"session.close"}') == wire.SessionClose()


@pytest.mark.parametrize(
    ("raw", "code", "event_id"),
    [
        ("{", "invalid_json", None),
        ("[]", "invalid_request", None),
        ("{}", "invalid_request", None),
        ('{"type":"nope","event_id":3}', "unknown_event_type", 3),
        ('{"type":"world.event","event_id":true}', "invalid_event", None),
        ('{"type":"world.event","event_id":-2}', "invalid_event", None),
        ('{"type":"world.event","event_id":1.5}', "invalid_event", None),
        ('{"type":"world.event","event_id":5,"prompt":[]}', "invalid_event", 5),
        ('{"type":"world.event","event_id":5,"surprise":1}', "invalid_event", 5),
        ('{"type":"session.update","session":{"pacing":"warp"}}', "invalid_request", None),
        ('{"type":"session.update","session":{"output":{"format":"gif"}}}', "invalid_request", None),
    ],
)
def test_bad_messages_become_typed_errors(raw: str, code: str, event_id: int | None) -> None:
    with pytest.raises(InvalidRequest) as error:
        wire.decode_client(raw)
    assert (error.value.code, error.value.event_id) == (code, event_id)


def test_oversized_messages_are_refused_before_parsing() -> None:
    with pytest.raises(InvalidRequest) as error:
        wire.decode_client(" " * (wire.MAX_MESSAGE_BYTES + 1))
    assert error.value.code == "message_too_large"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=10,
)


@given(st.binary(max_size=200))
def test_fuzz_bytes(raw: bytes) -> None:
    with contextlib.suppress(InvalidRequest):
        wire.decode_client(raw)


@given(
    st.dictionaries(
        st.sampled_from(["type", "event_id", "prompt", "controls", "session", "chunk_index"]), json_values
    )
)
def test_fuzz_objects(message: dict[str, object]) -> None:
    message.setdefault("type", "world.event")
    try:
        event = wire.decode_client(json.dumps(message))
    except InvalidRequest as error:
        assert error.code in {"invalid_request", "invalid_event", "unknown_event_type", "invalid_json"}
    else:
        assert isinstance(event, wire.ClientEvent)


def test_server_events_round_trip() -> None:
    header = wire.ChunkHeader(3, "r", [1, 2], 4, 32, 32, "png", 750.0, wire.Timings(0.1, 2.0, 0.5))
    for event in (
        header,
        wire.EventAccepted(1, "duplicate", 0),
        wire.ResetDone(),
        wire.SessionClosed(),
        wire.Error(wire.ErrorBody("invalid_request_error", "stale_event", "m", None, 4)),
    ):
        encoded = wire.encode(event)
        assert wire.decode_server(encoded) == event
        assert msgspec.json.decode(encoded)["type"]
