"""The Realtime client-event codec: every valid event decodes, every bad one is a typed error."""

from __future__ import annotations

import binascii
import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from livegen.errors import InvalidRequest
from livegen.protocol import realtime as wire


@pytest.mark.parametrize(
    ("raw", "cls"),
    [
        ({"type": "session.update", "session": {"instructions": "hi"}}, wire.SessionUpdate),
        ({"type": "input_audio_buffer.append", "audio": "AAA="}, wire.AudioAppend),
        ({"type": "input_audio_buffer.commit"}, wire.AudioCommit),
        ({"type": "input.commit"}, wire.AudioCommit),
        ({"type": "input_audio_buffer.clear"}, wire.AudioClear),
        ({"type": "conversation.item.create", "item": {"type": "message"}}, wire.ItemCreate),
        ({"type": "conversation.item.retrieve", "item_id": "i"}, wire.ItemRetrieve),
        ({"type": "conversation.item.delete", "item_id": "i"}, wire.ItemDelete),
        (
            {"type": "conversation.item.truncate", "item_id": "i", "content_index": 0, "audio_end_ms": 5},
            wire.ItemTruncate,
        ),
        ({"type": "response.create"}, wire.ResponseCreate),
        ({"type": "response.cancel", "response_id": "r"}, wire.ResponseCancel),
        ({"type": "output_audio_buffer.clear"}, wire.OutputAudioClear),
        ({"type": "playback.ack", "response_id": "r", "played_ms": 10}, wire.PlaybackAck),
        ({"type": "session.close"}, wire.SessionClose),
    ],
)
def test_each_event_type_decodes(raw: dict[str, object], cls: type[wire.ClientEvent]) -> None:
    event = wire.decode(json.dumps({**raw, "event_id": "evt_1"}))
    assert type(event) is cls and event.event_id == "evt_1"


@pytest.mark.parametrize(
    ("text", "code", "param"),
    [
        ("{nope", "invalid_json", None),
        ("[1, 2]", "invalid_event", None),
        ('{"event_id": "e"}', "invalid_event", "type"),
        ('{"type": "response.dance", "event_id": "e"}', "invalid_value", "type"),
        (
            '{"type": "conversation.item.truncate", "item_id": "i", "audio_end_ms": "x", "event_id": "e"}',
            "invalid_type",
            "audio_end_ms",
        ),
        (
            '{"type": "conversation.item.truncate", "item_id": "i", "audio_end_ms": -1, "event_id": "e"}',
            "invalid_value",
            "audio_end_ms",
        ),
        ('{"type": "input_audio_buffer.append", "event_id": "e"}', "missing_required_parameter", "audio"),
        (
            '{"type": "response.create", "response": {"instructions": 1}, "event_id": "e"}',
            "invalid_type",
            "response.instructions",
        ),
    ],
)
def test_bad_events_are_typed_errors_with_the_event_id(text: str, code: str, param: str | None) -> None:
    with pytest.raises(InvalidRequest) as caught:
        wire.decode(text)
    assert caught.value.code == code
    if param is not None:
        assert caught.value.param == param
    if '"event_id": "e"' in text:
        assert caught.value.event_id == "e"


def test_audio_is_strict_base64() -> None:
    assert wire.AudioAppend(audio="AAEC").audio_bytes() == b"\x00\x01\x02"
    for bad in ("AAE", "A*==", "AAEC\n!"):
        with pytest.raises(InvalidRequest) as caught:
            wire.AudioAppend(audio=bad, event_id="x").audio_bytes()
        assert caught.value.code == "invalid_base64" and caught.value.event_id == "x"


_BASE64_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_BASE64_TEXT = st.text(alphabet=_BASE64_ALPHABET + "= \n-é", max_size=40)


@given(_BASE64_TEXT)
def test_audio_decodes_exactly_as_strict_base64_does(text: str) -> None:
    """The SIMD decoder is a fast path only: every text gets strict base64's bytes, or its refusal
    with its message (padding past a whole quantum, ``"YWJj="``, is accepted as before)."""
    try:
        expected: bytes | str = binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        expected = f"audio is not valid base64: {exc}"
    try:
        got: bytes | str = wire.AudioAppend(audio=text).audio_bytes()
    except InvalidRequest as error:
        assert error.code == "invalid_base64"
        got = error.message
    assert got == expected


def test_padding_past_a_whole_quantum_is_accepted_as_strict_base64_accepts_it() -> None:
    assert wire.AudioAppend(audio="YWJj=").audio_bytes() == b"abc"


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)


@given(
    kind=st.sampled_from([*wire.EVENT_TYPES, "x", ""]),
    fields=st.dictionaries(
        st.sampled_from(
            ["audio", "item_id", "session", "item", "audio_end_ms", "played_ms", "response", "event_id"]
        ),
        json_values,
        max_size=4,
    ),
)
def test_decode_never_fails_untyped(kind: str, fields: dict[str, object]) -> None:
    try:
        event = wire.decode(json.dumps({"type": kind, **fields}))
    except InvalidRequest as error:
        assert error.code in {
            "invalid_event",
            "unknown_event_type",
            "invalid_type",
            "invalid_value",
            "missing_required_parameter",
        }
    else:
        assert wire.BETA_ALIASES.get(kind, kind) == event.TYPE


@given(st.binary(max_size=64))
def test_decode_of_arbitrary_bytes_is_typed(data: bytes) -> None:
    with contextlib.suppress(InvalidRequest):
        wire.decode(data)
