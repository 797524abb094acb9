"""Live input transcription in the session core: captions of the turn being spoken reach the client
as deltas of the item that turn will become, before it is committed."""

from __future__ import annotations

import base64
import itertools
from typing import Any

import msgspec
import pytest

from livegen.errors import RemoteProtocolError
from livegen.models.voice import OutputKind, VoiceOutput
from livegen.protocol import realtime as wire
from livegen.voice.chain import Send
from livegen.voice.session import Limits, ModelFacts, Session
from voice.drive import drive

RATE = 8_000


def new_session(turn_detection: dict[str, Any] | None) -> Session:
    counter = itertools.count()
    session = Session("s", ModelFacts("m", RATE, RATE, True), lambda p: f"{p}_{next(counter)}", Limits())
    drive(session.open, 0.0)
    fmt = {"type": "audio/pcm", "rate": RATE}
    audio_in = {"format": fmt, "turn_detection": turn_detection, "transcription": {"model": "whisper-base"}}
    drive(
        session.receive,
        wire.session_update({"audio": {"input": audio_in, "output": {"format": fmt}}}),
        0.0,
    )
    return session


def sent(effects: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(e.type, e.as_dict()) for e in effects if isinstance(e, Send)]


def output(kind: OutputKind, **fields: Any) -> VoiceOutput:
    return VoiceOutput(kind, 0, **fields)


def test_captions_of_the_spoken_turn_are_deltas_of_the_item_it_becomes() -> None:
    session = new_session({"type": "server_vad", "create_response": False})
    audio = base64.b64encode(bytes(RATE)).decode()
    drive(session.receive, wire.AudioAppend(audio=audio), 0.1)
    [(_, started)] = sent(drive(session.on_output, output(OutputKind.SPEECH_STARTED, audio_ms=100), 0.2))
    item_id = started["item_id"]
    live = sent(drive(session.on_output, output(OutputKind.TRANSCRIPT_DELTA, text="What is"), 0.3))
    assert live == [
        (
            "conversation.item.input_audio_transcription.delta",
            {**live[0][1], "item_id": item_id, "content_index": 0, "delta": "What is"},
        )
    ]
    stopped = sent(drive(session.on_output, output(OutputKind.SPEECH_STOPPED, audio_ms=900), 0.9))
    assert ("input_audio_buffer.committed", item_id) in [(t, e.get("item_id")) for t, e in stopped]
    rest = sent(
        drive(session.on_output, output(OutputKind.TRANSCRIPT_DELTA, item_id=item_id, text=" 7 plus 5?"), 1.0)
    )
    done = sent(
        drive(
            session.on_output,
            output(OutputKind.TRANSCRIPT_DONE, item_id=item_id, text="What is 7 plus 5?"),
            1.0,
        )
    )
    assert rest[0][1]["delta"] == " 7 plus 5?"
    assert done[0][0] == "conversation.item.input_audio_transcription.completed"
    assert live[0][1]["delta"] + rest[0][1]["delta"] == done[0][1]["transcript"]


def test_a_caption_with_no_turn_announced_is_dropped() -> None:
    session = new_session(None)  # no server VAD: no item id before the commit
    assert drive(session.on_output, output(OutputKind.TRANSCRIPT_DELTA, text="What is"), 0.3) == []
    session = new_session({"type": "server_vad"})
    assert (
        drive(session.on_output, output(OutputKind.TRANSCRIPT_DELTA, text="What is"), 0.3) == []
    )  # not speaking


def test_transcription_language_and_prompt_reach_the_model_and_are_echoed() -> None:
    session = new_session({"type": "server_vad"})
    transcription = {"model": "whisper-base", "language": "de", "prompt": "Siobhan, Niamh"}
    effects = drive(
        session.receive,
        wire.session_update({"audio": {"input": {"transcription": transcription}}}),
        0.1,
    )
    [(_, updated)] = [(t, e) for t, e in sent(effects) if t == "session.updated"]
    assert updated["session"]["audio"]["input"]["transcription"] == transcription
    stream = session.config.stream_config()
    assert (stream.transcription_model, stream.transcription_language, stream.transcription_prompt) == (
        "whisper-base",
        "de",
        "Siobhan, Niamh",
    )


def test_a_transcription_session_commits_turns_but_never_answers() -> None:
    session = new_session({"type": "server_vad"})
    effects = drive(session.receive, wire.session_update({"type": "transcription"}), 0.1)
    [(_, updated)] = [(t, e) for t, e in sent(effects) if t == "session.updated"]
    assert updated["session"]["type"] == "transcription"
    assert updated["session"]["object"] == "realtime.transcription_session"
    assert "output" not in updated["session"]["audio"]
    assert session.config.stream_config().transcription_model  # it always transcribes
    drive(session.receive, wire.AudioAppend(audio=base64.b64encode(bytes(RATE)).decode()), 0.2)
    drive(session.on_output, output(OutputKind.SPEECH_STARTED, audio_ms=100), 0.3)
    stopped = [
        t for t, _ in sent(drive(session.on_output, output(OutputKind.SPEECH_STOPPED, audio_ms=900), 0.9))
    ]
    assert "input_audio_buffer.committed" in stopped and "response.created" not in stopped
    assert session.response is None
    with pytest.raises(RemoteProtocolError) as refused:
        drive(session.receive, wire.ResponseCreate(), 1.0)
    assert refused.value.code == "no_responses_in_transcription_session"


def test_an_unknown_session_type_is_refused() -> None:
    session = new_session({"type": "server_vad"})
    with pytest.raises(RemoteProtocolError) as refused:
        drive(session.receive, wire.session_update({"type": "translation"}), 0.1)
    assert (refused.value.code, refused.value.param) == ("invalid_value", "session.type")
    assert session.config.session_type == "realtime"


def test_beta_transcription_session_update_is_a_session_update_of_a_transcription_session() -> None:
    from livegen.protocol.realtime import beta
    from livegen.protocol.realtime.server import SessionUpdated, type_of
    from livegen.voice.config import Config

    event = wire.decode(
        '{"type": "transcription_session.update", "session": {"input_audio_transcription": {"model": "x"}}}'
    )
    assert isinstance(event, wire.SessionUpdate)
    expected = {"input_audio_transcription": {"model": "x"}, "type": "transcription"}
    assert msgspec.to_builtins(event.session) == expected  # the fields left out stay UNSET
    session = new_session({"type": "server_vad"})
    [updated] = [e.event for e in drive(session.receive, event, 0.1) if isinstance(e, Send)]
    assert type_of(beta.to_beta(updated)) == "transcription_session.updated"
    realtime = SessionUpdated(session=Config(model="m").to_object("s"))
    assert type_of(beta.to_beta(realtime)) == "session.updated"


@pytest.mark.parametrize("logprobs", [None, ({"token": " Hi", "logprob": -0.25, "bytes": [32, 72, 105]},)])
def test_a_completed_transcript_carries_logprobs_only_when_the_model_sent_them(logprobs: Any) -> None:
    session = new_session({"type": "server_vad", "create_response": False})
    drive(session.receive, wire.AudioAppend(audio=base64.b64encode(bytes(RATE)).decode()), 0.1)
    [(_, started)] = sent(drive(session.on_output, output(OutputKind.SPEECH_STARTED, audio_ms=100), 0.2))
    item_id = started["item_id"]
    sent(drive(session.on_output, output(OutputKind.SPEECH_STOPPED, audio_ms=900), 0.9))
    done = output(OutputKind.TRANSCRIPT_DONE, item_id=item_id, text="Hi", logprobs=logprobs)
    [(kind, event)] = sent(drive(session.on_output, done, 1.0))
    assert kind == "conversation.item.input_audio_transcription.completed"
    if logprobs is None:
        assert "logprobs" not in event  # as before include was honoured
    else:
        assert event["logprobs"] == list(logprobs)
