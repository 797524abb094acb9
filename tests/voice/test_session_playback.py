"""Pacing and the playback ledger, driven with an explicit clock (no waiting, no wall time)."""

from __future__ import annotations

import base64
import itertools
from typing import Any

import numpy as np

from livegen.models.voice import OutputKind, VoiceOutput
from livegen.protocol import realtime as wire
from livegen.voice.chain import Send
from livegen.voice.session import Limits, ModelFacts, Session
from voice.drive import drive

RATE = 8_000


def new_session(lead_ms: float = 200) -> Session:
    counter = itertools.count()
    session = Session(
        "s", ModelFacts("m", RATE, RATE, False), lambda p: f"{p}_{next(counter)}", Limits(lead_ms=lead_ms)
    )
    drive(session.open, 0.0)
    fmt = {"type": "audio/pcm", "rate": RATE}
    drive(
        session.receive,
        wire.session_update({"audio": {"input": {"format": fmt}, "output": {"format": fmt}}}),
        0.0,
    )
    return session


def events(effects: list[Any], kind: str) -> list[dict[str, Any]]:
    return [e.as_dict() for e in effects if isinstance(e, Send) and e.type == kind]


def speak(session: Session, now: float, words: list[str], audio_ms: int) -> list[Any]:
    response = session.response
    assert response is not None
    effects: list[Any] = []
    for word in words:
        effects += drive(
            session.on_output, VoiceOutput(OutputKind.TEXT_DELTA, 0, response.id, text=word), now
        )
    for _ in range(audio_ms // 100):
        audio = bytes(RATE * 2 // 10)
        effects += drive(
            session.on_output, VoiceOutput(OutputKind.AUDIO_DELTA, 0, response.id, audio=audio), now
        )
    return effects


def test_audio_leaves_at_real_time_plus_the_lead() -> None:
    session = new_session(lead_ms=200)
    drive(session.receive, wire.ResponseCreate(), 0.0)
    effects = speak(session, 10.0, ["one two"], 2000)
    assert len(events(effects, "response.output_audio.delta")) == 2  # 0-100 now, 100-200 inside the lead
    assert session.next_deadline() == 10.0 + (300 - 200) / 1000
    released = events(drive(session.tick, 11.0), "response.output_audio.delta")
    assert len(released) == 10  # up to 1.2 s: one second of playback plus the lead
    assert session.playbacks[next(iter(session.playbacks))].sent_ms == 1200


def test_interruption_keeps_only_what_was_heard() -> None:
    session = new_session(lead_ms=200)
    drive(session.receive, wire.ResponseCreate(), 0.0)
    speak(session, 0.0, ["aaaa ", "bbbb ", "cccc ", "dddd "], 2000)
    drive(session.tick, 0.5)
    item_id = next(iter(session.playbacks))
    drive(session.receive, wire.PlaybackAck(item_id=item_id, played_ms=500), 0.5)
    effects = drive(session.receive, wire.ResponseCancel(), 0.5)
    done = events(effects, "response.done")[0]["response"]
    assert done["status"] == "cancelled" and done["status_details"]["reason"] == "client_cancelled"
    assert events(effects, "conversation.item.truncated")[0]["audio_end_ms"] == 500
    item = session.conversation.get(item_id)
    assert item.audio_ms == 500 and item.status == "incomplete"
    assert item.text == "aaaa "  # a quarter of 2 s heard: a quarter of the words
    # Nothing more of it is sent, whatever the model still says at the old epoch.
    late = drive(
        session.on_output, VoiceOutput(OutputKind.AUDIO_DELTA, 0, done["id"], audio=bytes(1600)), 0.6
    )
    assert late == [] and session.num_stale_outputs == 1


def test_acks_never_pass_what_was_sent_and_truncate_clamps() -> None:
    session = new_session(lead_ms=0)
    drive(session.receive, wire.ResponseCreate(), 0.0)
    speak(session, 0.0, ["x"], 1000)
    response = session.response
    assert response is not None
    drive(session.on_output, VoiceOutput(OutputKind.RESPONSE_DONE, 0, response.id, status="completed"), 0.0)
    drive(session.tick, 5.0)
    assert session.response is None
    item_id = next(iter(session.playbacks))
    drive(session.receive, wire.PlaybackAck(item_id=item_id, played_ms=99_999), 5.0)
    assert session.playbacks[item_id].played_ms == 1000
    effects = drive(
        session.receive, wire.ItemTruncate(item_id=item_id, audio_end_ms=1100), 5.0
    )  # within the slack
    assert events(effects, "conversation.item.truncated")[0]["audio_end_ms"] == 1000


def loud(ms: int) -> wire.AudioAppend:
    import base64

    import numpy as np

    wave = (np.sin(np.arange(RATE * ms // 1000) * 0.3) * 9000).astype("<i2").tobytes()
    return wire.AudioAppend(audio=base64.b64encode(wave).decode())


def test_barge_in_cancels_through_the_fence_and_cuts_history_where_the_listener_was() -> None:
    session = new_session(lead_ms=200)
    drive(session.receive, wire.ResponseCreate(), 0.0)
    speak(session, 0.0, ["one ", "two ", "three ", "four "], 4000)
    drive(session.tick, 1.0)  # 1 s played, 1.2 s sent
    epoch = session.epoch
    effects = drive(session.receive, loud(100), 1.0)
    kinds = [e.type for e in effects if isinstance(e, Send)]
    assert kinds.index("input_audio_buffer.speech_started") < kinds.index("response.done")
    done = events(effects, "response.done")[0]["response"]
    assert (done["status"], done["status_details"]["reason"]) == ("cancelled", "turn_detected")
    assert events(effects, "conversation.item.truncated")[0]["audio_end_ms"] == 1000
    assert session.epoch == epoch + 1
    assert session.conversation.get(done["output"][0]["id"]).text == "one "
    assert session.response is None and session.next_deadline() is None  # nothing more to send


def test_clear_gives_back_every_reserved_byte_and_fences_queued_appends() -> None:
    session = new_session()
    runs = []
    for _ in range(5):
        runs += [e.attempt for e in drive(session.receive, loud(100), 0.0) if hasattr(e, "attempt")]
    assert session.ledger.pending_bytes == 5 * 1600
    drive(session.receive, wire.AudioClear(), 0.0)
    assert session.ledger.pending_bytes == 0
    assert not any(a.is_live for a in runs if a.kind == "append")


def test_clear_keeps_committed_turns_on_their_way_to_the_model() -> None:
    session = new_session()
    committed = [e.attempt for e in drive(session.receive, loud(100), 0.0) if hasattr(e, "attempt")]
    committed += [e.attempt for e in drive(session.receive, wire.AudioCommit(), 0.0) if hasattr(e, "attempt")]
    dropped = [e.attempt for e in drive(session.receive, loud(100), 0.0) if hasattr(e, "attempt")]
    drive(session.receive, wire.AudioClear(), 0.0)
    assert all(a.is_live for a in committed) and not any(a.is_live for a in dropped)
    assert session.ledger.pending_bytes == sum(a.reservation.num_bytes for a in committed if a.reservation)


def _idle_session(timeout_ms: int) -> Session:
    session = new_session(lead_ms=0)
    detection = {"type": "server_vad", "silence_duration_ms": 200, "idle_timeout_ms": timeout_ms}
    drive(session.receive, wire.session_update({"audio": {"input": {"turn_detection": detection}}}), 0.0)
    return session


def _finish(session: Session, now: float, audio_ms: int) -> None:
    response = session.response
    assert response is not None
    speak(session, now, ["hello"], audio_ms)
    drive(session.on_output, VoiceOutput(OutputKind.RESPONSE_DONE, 0, response.id, status="completed"), now)
    drive(session.tick, now + audio_ms / 1000)


def test_idle_timeout_answers_after_the_answer_played_and_nobody_spoke() -> None:
    session = _idle_session(1000)
    assert session.next_deadline() is None  # no answer yet: nothing to time
    drive(session.receive, wire.ResponseCreate(), 0.0)
    _finish(session, 0.0, 1000)  # one second of answer, played from t=0
    assert session.response is None
    assert session.next_deadline() == 2.0  # played until 1.0 s, then 1 s of silence
    assert drive(session.tick, 1.9) == []
    silence = wire.AudioAppend(audio=base64.b64encode(bytes(RATE * 2 // 10)).decode())
    drive(session.receive, silence, 1.95)  # quiet input keeps the timer running
    effects = drive(session.tick, 2.0)
    triggered = events(effects, "input_audio_buffer.timeout_triggered")
    assert len(triggered) == 1 and triggered[0]["audio_end_ms"] - triggered[0]["audio_start_ms"] == 100
    assert events(effects, "input_audio_buffer.committed")[0]["item_id"] == triggered[0]["item_id"]
    assert len(events(effects, "response.created")) == 1
    assert session.next_deadline() is None  # once per finished answer


def test_speech_stops_the_idle_timer() -> None:
    session = _idle_session(1000)
    drive(session.receive, wire.ResponseCreate(), 0.0)
    _finish(session, 0.0, 500)
    loud = (np.sin(np.arange(RATE // 10) * 0.3) * 9000).astype("<i2").tobytes()
    effects = drive(session.receive, wire.AudioAppend(audio=base64.b64encode(loud).decode()), 1.0)
    assert events(effects, "input_audio_buffer.speech_started")
    assert session.next_deadline() is None
    assert not events(drive(session.tick, 5.0), "input_audio_buffer.timeout_triggered")


def test_without_idle_timeout_nothing_is_timed() -> None:
    session = _idle_session(1000)
    drive(
        session.receive,
        wire.session_update(
            {"audio": {"input": {"turn_detection": {"type": "server_vad", "idle_timeout_ms": None}}}}
        ),
        0.0,
    )
    drive(session.receive, wire.ResponseCreate(), 0.0)
    _finish(session, 0.0, 500)
    assert session.next_deadline() is None and drive(session.tick, 60.0) == []


def _answered_and_acked_short(played_ms: int) -> tuple[Session, str]:
    """One second of answer, all sent by t=1 s and acked at ``played_ms`` (server VAD on)."""
    session = new_session(lead_ms=200)
    drive(session.receive, wire.ResponseCreate(), 0.0)
    speak(session, 0.0, ["one ", "two "], 1000)
    response = session.response
    assert response is not None
    drive(session.on_output, VoiceOutput(OutputKind.RESPONSE_DONE, 0, response.id, status="completed"), 0.0)
    drive(session.tick, 0.8)
    assert session.response is None  # all audio sent: the response is over, its audio still plays
    item_id = next(iter(session.playbacks))
    drive(session.receive, wire.PlaybackAck(item_id=item_id, played_ms=played_ms), 0.9)
    return session, item_id


def test_an_answer_acked_a_millisecond_short_has_finished_once_all_its_audio_was_due() -> None:
    # vllm-omni's client acks int(played_ms): its last ack can fall short of what was sent.
    session, item_id = _answered_and_acked_short(999)
    epoch = session.epoch
    effects = drive(session.receive, loud(100), 5.0)  # the user's next utterance, seconds later
    assert events(effects, "input_audio_buffer.speech_started")
    assert not events(effects, "conversation.item.truncated")
    assert session.epoch == epoch  # nothing to interrupt: no fence advanced
    item = session.conversation.get(item_id)
    assert (item.status, item.audio_ms, item.text) == ("completed", 1000, "one two ")


def test_acks_still_cut_an_answer_interrupted_while_its_audio_is_due() -> None:
    session, item_id = _answered_and_acked_short(700)
    effects = drive(session.receive, loud(100), 0.95)  # 0.95 s into one second of audio: still playing
    assert events(effects, "conversation.item.truncated")[0]["audio_end_ms"] == 700
    assert session.conversation.get(item_id).audio_ms == 700
