"""The turn policy alone: what each speech edge and the idle clock ask of the session."""

from __future__ import annotations

import itertools

from livegen.voice.turn_detection import ServerVad
from livegen.voice.turns import TurnPolicy


def new_policy() -> TurnPolicy:
    counter = itertools.count()
    return TurnPolicy(lambda p: f"{p}_{next(counter)}")


def test_speech_start_names_the_turn_and_barges_in_only_on_a_speaking_answer() -> None:
    policy = new_policy()
    vad = ServerVad(prefix_padding_ms=300)
    step = policy.started(vad, 1000, is_speaking=False)
    assert step.event.as_dict()["audio_start_ms"] == 700 and not step.barge_in
    assert step.event.as_dict()["item_id"] == policy.item_id
    again = policy.started(vad, 1200, is_speaking=True)
    assert again.barge_in and again.event.as_dict()["item_id"] == step.event.as_dict()["item_id"]
    assert not policy.started(ServerVad(interrupt_response=False), 0, is_speaking=True).barge_in


def test_speech_stop_commits_what_is_buffered_and_answers_if_it_may() -> None:
    policy = new_policy()
    vad = ServerVad()
    started = policy.started(vad, 0, is_speaking=False)
    step = policy.stopped(vad, 900, is_buffered=True, can_respond=True)
    assert step.commit == started.event.as_dict()["item_id"] and step.respond
    assert policy.stopped(vad, 900, is_buffered=False, can_respond=True).commit is None
    assert not policy.stopped(vad, 900, is_buffered=True, can_respond=False).respond
    assert not policy.stopped(ServerVad(create_response=False), 9, is_buffered=True, can_respond=True).respond


def test_the_idle_clock_runs_from_the_heard_answer_and_fires_once() -> None:
    policy = new_policy()
    vad = ServerVad(idle_timeout_ms=5000)
    assert policy.deadline(vad, can_idle=True) is None  # no answer yet
    policy.answered(played_until=10.0, input_ms=400.0)
    assert policy.deadline(vad, can_idle=True) == 15.0
    assert policy.deadline(vad, can_idle=False) is None
    assert policy.deadline(ServerVad(), can_idle=True) is None
    step = policy.timed_out(input_ms=900.0, is_buffered=False)
    assert step.respond and step.commit is None
    assert (step.event.as_dict()["audio_start_ms"], step.event.as_dict()["audio_end_ms"]) == (400, 900)
    assert policy.deadline(vad, can_idle=True) is None


def test_speech_stops_the_idle_clock() -> None:
    policy = new_policy()
    vad = ServerVad(idle_timeout_ms=5000)
    policy.answered(played_until=0.0, input_ms=0.0)
    policy.started(vad, 0, is_speaking=False)
    assert policy.deadline(vad, can_idle=True) is None


def test_the_fallback_detector_runs_only_for_a_model_without_one() -> None:
    policy = new_policy()
    loud = (b"\x00\x40" * 8000) * 2
    policy.configure(ServerVad(), model_has_vad=True, input_rate=16_000)
    assert policy.feed(loud) == []
    policy.configure(ServerVad(), model_has_vad=False, input_rate=16_000)
    assert [t.edge.value for t in policy.feed(loud)][:1] == ["started"]
