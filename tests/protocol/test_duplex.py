"""vllm-omni's duplex dialect at the edge: what it translates, and what it refuses."""

from __future__ import annotations

import json
from typing import Any

import pytest

from livegen.errors import InvalidRequest
from livegen.protocol import realtime as wire
from livegen.protocol.audio import AudioFormat
from livegen.protocol.realtime import server as ev
from livegen.protocol.realtime.duplex import DuplexDialect, EventAck, Heartbeat, parse_resume, wants_duplex
from livegen.voice.config import Config
from livegen.voice.turn_detection import ServerVad


def session_event(kind: str, turn_detection: ServerVad | None = None, rate: int = 16_000) -> ev.ServerEvent:
    fmt = AudioFormat(rate=rate)
    session = Config(model="m", input_format=fmt, turn_detection=turn_detection).to_object("sess_1")
    cls = ev.SessionCreated if kind == "session.created" else ev.SessionUpdated
    return cls(session=session)


def opened(update: dict[str, Any]) -> DuplexDialect:
    """A dialect whose first message was ``session.update`` with ``update``, answered."""
    dialect = DuplexDialect(hold_created=True)
    dialect.inbound(json.dumps({"type": "session.update", "event_id": "u1", "session": update}))
    assert dialect.outbound(session_event("session.created", rate=24_000)) is None  # held back
    created = dialect.outbound(session_event("session.updated"))
    assert created is not None and ev.type_of(created) == "session.created"
    return dialect


def test_it_is_asked_for_per_connection() -> None:
    assert wants_duplex({"duplex": "1", "model": "m"}) and wants_duplex({"duplex": "true"})
    assert not wants_duplex({}) and not wants_duplex({"duplex": "0"})


def test_auto_response_starts_an_answer_after_a_manual_commit_of_new_audio() -> None:
    dialect = opened({"turn_detection": None, "extra_body": {"auto_response": True}})
    append = {
        "type": "input_audio_buffer.append",
        "audio": "AAAA",
        "sample_rate_hz": 16_000,
        "format": "pcm16",
    }
    assert isinstance(dialect.inbound(json.dumps(append)), list)
    events = dialect.inbound(json.dumps({"type": "input_audio_buffer.commit", "final": True}))
    assert [type(e) for e in events] == [wire.AudioCommit, wire.ResponseCreate]  # type: ignore[union-attr]
    again = dialect.inbound(json.dumps({"type": "input_audio_buffer.commit"}))
    assert [type(e) for e in again] == [wire.AudioCommit]  # type: ignore[union-attr]  # nothing new
    forced = dialect.inbound(json.dumps({"type": "input_audio_buffer.commit", "response_create": False}))
    assert [type(e) for e in forced] == [wire.AudioCommit]  # type: ignore[union-attr]


def test_a_refused_update_does_not_turn_auto_response_on() -> None:
    dialect = DuplexDialect()
    dialect.inbound(json.dumps({"type": "session.update", "event_id": "u1", "session": {"extra_body": {}}}))
    update = {"type": "session.update", "event_id": "u2", "session": {"extra_body": {"auto_response": True}}}
    dialect.inbound(json.dumps(update))
    dialect.outbound(session_event("session.updated"))
    error = ev.Error(error={"code": "invalid_value", "event_id": "u2"})
    assert dialect.outbound(error) == error
    assert not dialect.auto_response


def test_heartbeats_and_acks_are_the_connections_business() -> None:
    dialect = DuplexDialect()
    assert isinstance(dialect.inbound('{"type": "session.heartbeat"}'), Heartbeat)
    assert dialect.inbound('{"type": "session.event_ack", "server_event_seq": 7}') == EventAck(7, None)
    with pytest.raises(InvalidRequest) as refused:
        dialect.inbound('{"type": "session.event_ack", "server_event_seq": -1, "event_id": "a"}')
    assert (refused.value.code, refused.value.event_id) == ("invalid_event_ack", "a")


@pytest.mark.parametrize(
    ("event", "param"),
    [
        ({"type": "session.update", "session": {"ref_audio": "data:..."}}, "session.ref_audio"),
        ({"type": "session.update", "session": {"temperature": 0.7}}, "session.temperature"),
        (
            {"type": "session.update", "session": {"extra_body": {"force_listen": True}}},
            "session.extra_body.force_listen",
        ),
        ({"type": "input_audio_buffer.append", "audio": "AAAA", "sample_rate_hz": 8_000}, "sample_rate_hz"),
        ({"type": "input_audio_buffer.append", "audio": "AAAA", "format": "pcm_f32le"}, "format"),
        ({"type": "input_audio_buffer.append", "audio": "AAAA", "is_speech": True}, "is_speech"),
        ({"type": "input_audio_buffer.append", "audio": "", "video_frames": ["x"]}, "video_frames"),
        ({"type": "input_audio_buffer.commit", "final": False}, "final"),
        ({"type": "playback.ack", "played_ms": 100, "committed_ms": 50}, "committed_ms"),
    ],
)
def test_what_livegen_cannot_honour_is_refused_never_ignored(event: dict[str, Any], param: str) -> None:
    dialect = opened({"turn_detection": None})
    with pytest.raises(InvalidRequest) as refused:
        dialect.inbound(json.dumps({**event, "event_id": "e1"}))
    assert (refused.value.code, refused.value.param, refused.value.event_id) == (
        "unsupported_parameter",
        param,
        "e1",
    )


def test_a_resume_must_name_session_token_and_a_seq() -> None:
    resume = {"type": "session.resume", "session_id": "s", "resume_token": "t"}
    ok = parse_resume(json.dumps({**resume, "last_received_server_event_seq": 3}))
    assert (ok.session_id, ok.resume_token, ok.last_seq) == ("s", "t", 3)
    for bad in (
        '{"type": "session.resume", "session_id": "s"}',
        "[1]",
        '{"type": "session.resume", '
        '"session_id": "s", "resume_token": "t", "last_received_server_event_seq": true}',
    ):
        with pytest.raises(InvalidRequest) as refused:
            parse_resume(bad)
        assert refused.value.code == "invalid_session_resume"


def test_the_held_greetings_capabilities_reach_the_session_created_that_replaces_it() -> None:
    from livegen.protocol.realtime.session import CapabilitiesObject

    dialect = DuplexDialect(hold_created=True)
    dialect.inbound(json.dumps({"type": "session.update", "event_id": "u1", "session": {}}))
    greeting = session_event("session.created")
    assert isinstance(greeting, ev.SessionCreated)
    greeting.session.capabilities = CapabilitiesObject(duplex="native", frame_ms=80.0)  # type: ignore[union-attr]
    assert dialect.outbound(greeting) is None
    created = dialect.outbound(session_event("session.updated"))
    assert isinstance(created, ev.SessionCreated)
    assert json.loads(ev.encode(created))["session"]["capabilities"]["frame_ms"] == 80.0
