"""The translation dialect (``voice/translation.py``): client events in, the voice session's out.

The end-to-end behaviour is ``tests/conformance/test_openai_translation.py``'s (the SDK against a
real server); these pin the dialect's own rules: what a client may change, what it is told, once.
"""

from __future__ import annotations

import json

import pytest

from livegen.errors import RemoteProtocolError
from livegen.voice.translation import TranslationDialect


def _dialect() -> TranslationDialect:
    return TranslationDialect("sess_1", "gpt-realtime-translate")


def _out(dialect: TranslationDialect, event: dict[str, object]) -> list[dict[str, object]]:
    return dialect.outbound(json.dumps({"event_id": "e", **event}))


def test_a_language_becomes_the_instruction_and_the_session_shows_it() -> None:
    dialect = _dialect()
    update = {"type": "session.update", "session": {"audio": {"output": {"language": "Japanese"}}}}
    realtime = json.loads(dialect.inbound(json.dumps(update)) or "")
    assert "into the language Japanese" in realtime["session"]["instructions"]
    assert realtime["session"]["audio"]["input"]["turn_detection"]["type"] == "server_vad"
    assert dialect.session()["audio"]["output"] == {"language": "Japanese"}


@pytest.mark.parametrize("language", ["", "   ", 7, "x" * 65])
def test_a_bad_language_is_refused_with_its_param_and_event_id(language: object) -> None:
    dialect = _dialect()
    update = {
        "type": "session.update",
        "event_id": "c1",
        "session": {"audio": {"output": {"language": language}}},
    }
    with pytest.raises(RemoteProtocolError) as refused:
        dialect.inbound(json.dumps(update))
    assert refused.value.code == "invalid_value" and refused.value.event_id == "c1"
    assert refused.value.param == "session.audio.output.language"
    assert dialect.config.language == "en"  # unchanged


def test_an_event_of_another_dialect_is_refused_naming_the_supported_ones() -> None:
    with pytest.raises(RemoteProtocolError) as refused:
        _dialect().inbound(json.dumps({"type": "response.create"}))
    assert refused.value.code == "invalid_value" and "session.input_audio_buffer.append" in str(refused.value)


def test_the_dialects_own_update_is_not_announced_but_the_clients_is() -> None:
    dialect = _dialect()
    dialect.opening()
    assert _out(dialect, {"type": "session.updated", "session": {}}) == []
    (shown,) = _out(dialect, {"type": "session.updated", "session": {}})
    assert shown["type"] == "session.updated" and shown["session"]["type"] == "translation"  # type: ignore[index]


def test_source_transcripts_only_when_asked_for() -> None:
    dialect = _dialect()
    delta = {"type": "conversation.item.input_audio_transcription.delta", "delta": "hola"}
    assert _out(dialect, delta) == []
    dialect.config.apply({"audio": {"input": {"transcription": {"model": "whisper-1"}}}})
    assert _out(dialect, delta) == [
        {"type": "session.input_transcript.delta", "event_id": "e", "delta": "hola"}
    ]


def test_responses_and_items_stay_inside_and_closed_is_said_once() -> None:
    dialect = _dialect()
    assert _out(dialect, {"type": "response.created", "response": {}}) == []
    assert dialect.responses == 1
    assert _out(dialect, {"type": "conversation.item.added", "item": {}}) == []
    assert _out(dialect, {"type": "response.done", "response": {}}) == [] and dialect.responses == 0
    assert [e["type"] for e in dialect.closing("")] == ["session.closed"]
    assert _out(dialect, {"type": "session.closed"}) == []


@pytest.mark.parametrize(
    ("audio_in", "param"),
    [
        ({"noise_reduction": {"type": "loud"}}, "session.audio.input.noise_reduction.type"),
        ({"noise_reduction": {}}, "session.audio.input.noise_reduction.type"),
        ({"transcription": {"model": 3}}, "session.audio.input.transcription.model"),
    ],
)
def test_a_refused_update_changes_nothing(audio_in: dict[str, object], param: str) -> None:
    dialect = _dialect()
    update = {"audio": {"output": {"language": "fr"}, "input": audio_in}}
    with pytest.raises(RemoteProtocolError) as refused:
        dialect.config.apply(update)
    assert refused.value.param == param
    assert (dialect.config.language, dialect.config.noise_reduction) == ("en", None)


def test_noise_reduction_reaches_the_voice_session() -> None:
    dialect = _dialect()
    dialect.config.apply({"audio": {"input": {"noise_reduction": {"type": "far_field", "strength": 0.5}}}})
    session = dialect.config.realtime_session()
    assert session["audio"]["input"]["noise_reduction"] == {"type": "far_field"}
    assert dialect.session()["audio"]["input"]["noise_reduction"]["type"] == "far_field"
