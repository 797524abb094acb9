"""The cascade behind the voice-model contract, driven with real synthesised speech.

Each test opens a ``VoiceStream`` on the real model (Silero, Whisper tiny.en,
the built-in responder or a local chat server, Piper in its worker process),
speaks to it in a voice unlike the assistant's, and checks what comes out:
turn events, transcripts, text, and answer audio that Whisper itself hears as
the answer.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from livegen.errors import CapacityExceeded, InvalidRequest, InvalidState
from livegen.models.cascade import responder, speaking
from livegen.models.cascade import stream as cascade_stream
from livegen.models.voice import (
    HistoryTurn,
    OutputKind,
    ResponseRequest,
    StreamConfig,
    TurnDetection,
    VoiceModel,
    VoiceStream,
)
from models.cascade.support import ChatServer, Driver, heard, speak_afresh, speak_as_user

pytestmark = pytest.mark.slow


def test_model_and_stream_fit_the_contract(cascade: Any) -> None:
    assert isinstance(cascade, VoiceModel)
    assert (cascade.name, cascade.input_rate, cascade.output_rate, cascade.has_vad) == (
        "cascade",
        16_000,
        24_000,
        True,
    )


async def test_spoken_question_gets_a_transcript_and_a_spoken_answer(cascade: Any) -> None:
    question = speak_as_user(cascade, "What is twelve times seven?", lead_s=0.5)
    stream = await cascade.open("s1", StreamConfig())
    assert isinstance(stream, VoiceStream)
    driver = Driver(stream)
    hits = cascade.stats.num_prepared_used
    await driver.say(1, question, realtime=True)
    stopped = await driver.wait_for(OutputKind.SPEECH_STOPPED)
    await stream.commit(1, "item_1")
    await stream.respond(1, ResponseRequest("resp_1"))
    await driver.wait_for(OutputKind.RESPONSE_DONE, response_id="resp_1")
    await driver.close()

    started = driver.of(OutputKind.SPEECH_STARTED)[0]
    assert 0 <= started.audio_ms <= 500  # speech begins at 500 ms; the start includes 300 ms padding
    assert stopped.audio_ms > started.audio_ms + 1000
    [transcript] = driver.of(OutputKind.TRANSCRIPT_DONE, item_id="item_1")
    assert "12" in transcript.text and ("7" in transcript.text or "seven" in transcript.text.lower())
    assert driver.text("resp_1") == "12 times 7 is 84."
    answer = driver.audio("resp_1")
    assert len(answer) / 48_000 > 0.8
    assert "84" in heard(cascade, answer)
    assert driver.of(OutputKind.RESPONSE_DONE)[0].status == "completed"
    assert {o.epoch for o in driver.outputs} == {1}
    # The answer was prepared at the pause before the silence window ran out.
    assert cascade.stats.num_prepared_used == hits + 1


async def test_barge_in_cancels_the_answer_and_the_next_turn_is_answered(cascade: Any) -> None:
    first = speak_as_user(cascade, "What can you do?")
    second = speak_as_user(cascade, "What time is it?", lead_s=0.1)
    stream = await cascade.open("s2", StreamConfig())
    driver = Driver(stream)
    await driver.say(1, first)
    await driver.wait_for(OutputKind.SPEECH_STOPPED)
    await stream.commit(1, "item_1")
    await stream.respond(1, ResponseRequest("resp_1"))
    await driver.wait_for(OutputKind.AUDIO_DELTA, response_id="resp_1")

    # The user talks over the answer: the detector says so, and the runtime cancels.
    await driver.say(1, second[: len(second) // 2])
    await driver.wait_for(OutputKind.SPEECH_STARTED, epoch=1, within=5)
    assert len(driver.of(OutputKind.SPEECH_STARTED)) == 2
    await stream.cancel(2)
    await asyncio.sleep(0.2)  # what was queued before the cancel drains
    num_after_cancel = len(driver.of(OutputKind.AUDIO_DELTA, response_id="resp_1"))
    await asyncio.sleep(1.5)
    # Nothing more of the cancelled answer, not even its end: the runtime owns that terminal.
    assert len(driver.of(OutputKind.AUDIO_DELTA, response_id="resp_1")) == num_after_cancel
    assert not driver.of(OutputKind.RESPONSE_DONE, response_id="resp_1")
    # The help answer is about 10 s of speech; only the pieces made before the cancel came out.
    assert len(driver.audio("resp_1")) / 48_000 < 8.0

    await driver.say(2, second[len(second) // 2 :])
    await driver.wait_for(OutputKind.SPEECH_STOPPED, epoch=2)
    await stream.commit(2, "item_2")
    await stream.respond(2, ResponseRequest("resp_2"))
    await driver.wait_for(OutputKind.RESPONSE_DONE, response_id="resp_2")
    await driver.close()
    assert driver.text("resp_2").startswith("It's ")
    assert all(o.epoch == 2 for o in driver.outputs if o.response_id == "resp_2")


async def test_client_commits_turns_without_server_vad(cascade: Any) -> None:
    config = StreamConfig(turn_detection=None, transcription_model="whisper-1")
    stream = await cascade.open("s3", config)
    driver = Driver(stream)
    await driver.say(5, speak_as_user(cascade, "Repeat after me, see you tomorrow."))
    await stream.commit(5, "item_1")
    await stream.respond(5, ResponseRequest("resp_1", modalities=("text",)))
    await driver.wait_for(OutputKind.RESPONSE_DONE, response_id="resp_1")
    await driver.close()
    assert not driver.of(OutputKind.SPEECH_STARTED) and not driver.of(OutputKind.SPEECH_STOPPED)
    assert "tomorrow" in driver.of(OutputKind.TRANSCRIPT_DONE)[0].text.lower()
    assert "tomorrow" in driver.text("resp_1").lower()
    assert not driver.of(OutputKind.AUDIO_DELTA)


async def test_a_long_turn_is_transcribed_in_pieces_while_it_is_spoken(cascade: Any) -> None:
    part_one = speak_afresh("Repeat after me, my name is John.", 0.2, 0.35)
    part_two = speak_afresh("And then it goes to sleep.", 0.0, 1.0)
    stream = await cascade.open("s4", StreamConfig())
    driver = Driver(stream)
    settled = cascade.stats.num_settled
    await driver.say(1, part_one + part_two)
    await driver.wait_for(OutputKind.SPEECH_STOPPED)
    assert len(driver.of(OutputKind.SPEECH_STARTED)) == 1  # one turn, with a pause inside
    await stream.commit(1, "item_1")
    await stream.respond(1, ResponseRequest("resp_1", modalities=("text",)))
    await driver.wait_for(OutputKind.RESPONSE_DONE)
    await driver.close()
    assert cascade.stats.num_settled == settled + 1
    text = driver.of(OutputKind.TRANSCRIPT_DONE)[0].text.lower()
    assert "john" in text and "sleep" in text
    assert "john" in driver.text("resp_1").lower() and "sleep" in driver.text("resp_1").lower()


async def test_clear_drops_the_uncommitted_speech(cascade: Any) -> None:
    stream = await cascade.open("s5", StreamConfig(turn_detection=None))
    driver = Driver(stream)
    await driver.say(1, speak_as_user(cascade, "Forget this."))
    await stream.clear(1)
    await stream.commit(1, "item_1")
    await driver.wait_for(OutputKind.TRANSCRIPT_DONE)
    await driver.close()
    assert driver.of(OutputKind.TRANSCRIPT_DONE)[0].text == ""
    assert not driver.of(OutputKind.TRANSCRIPT_DELTA)


async def test_answers_come_from_a_language_model_when_one_is_set(
    cascade: Any, chat_server: ChatServer
) -> None:
    chat_server.reply = ["Paris", " is the capital", " of France. ", "It is lovely."]
    cascade.use_llm(chat_server.url, "tiny")
    try:
        stream = await cascade.open("s6", StreamConfig(instructions="Answer briefly."))
    finally:
        cascade.use_llm(None, None)
    driver = Driver(stream)
    await driver.say(1, speak_as_user(cascade, "What is the capital of France?"))
    await driver.wait_for(OutputKind.SPEECH_STOPPED)
    await stream.commit(1, "item_3")
    history = [
        HistoryTurn("user", "Hello."),
        HistoryTurn("assistant", "Hi! How can"),
        HistoryTurn("user", ""),
    ]
    await stream.respond(1, ResponseRequest("resp_1", history=history))
    await driver.wait_for(OutputKind.RESPONSE_DONE, response_id="resp_1")
    await driver.close()
    assert driver.text("resp_1") == "Paris is the capital of France. It is lovely."
    assert len(driver.audio("resp_1")) > 48_000
    # An answer prepared at the pause assumed a new conversation; this one has a past, so it was redone.
    request = chat_server.requests[-1]
    roles = [message["role"] for message in request["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    assert request["messages"][0]["content"] == "Answer briefly."
    assert request["messages"][2]["content"] == "Hi! How can"
    assert "capital of france" in request["messages"][3]["content"].lower()


async def test_language_model_answers_are_prepared_at_the_pause_turn_after_turn(
    cascade: Any, chat_server: ChatServer
) -> None:
    chat_server.reply = ["Noted. ", "Anything else?"]
    cascade.use_llm(chat_server.url, "tiny")
    try:
        stream = await cascade.open("s9", StreamConfig())
    finally:
        cascade.use_llm(None, None)
    driver = Driver(stream)
    used = cascade.stats.num_prepared_used
    history: list[HistoryTurn] = []
    for turn, question in enumerate(["What is the capital of France?", "Forget this."], start=1):
        await driver.say(1, speak_as_user(cascade, question))
        await _wait_stops(driver, turn)
        await stream.commit(1, f"item_{turn}")
        transcript = await driver.wait_for(OutputKind.TRANSCRIPT_DONE, item_id=f"item_{turn}")
        # What the session core sends: the history so far, the new user item not yet transcribed.
        await stream.respond(1, ResponseRequest(f"resp_{turn}", history=(*history, HistoryTurn("user", ""))))
        await driver.wait_for(OutputKind.RESPONSE_DONE, response_id=f"resp_{turn}")
        history += [
            HistoryTurn("user", transcript.text),
            HistoryTurn("assistant", driver.text(f"resp_{turn}")),
        ]
    await driver.close()
    # One request per turn: each was made at the pause, and each matched the conversation.
    assert len(chat_server.requests) == 2
    assert cascade.stats.num_prepared_used == used + 2
    last = chat_server.requests[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "user"]
    assert last[2]["content"] == "Noted. Anything else?"


async def _wait_stops(driver: Driver, count: int) -> None:
    for _ in range(1000):
        if len(driver.of(OutputKind.SPEECH_STOPPED)) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"fewer than {count} speech stops")


async def test_asked_to_speak_first_the_assistant_opens(cascade: Any) -> None:
    stream = await cascade.open("s10", StreamConfig())
    driver = Driver(stream)
    await stream.respond(1, ResponseRequest("resp_1", modalities=("text",)))
    await stream.respond(
        1, ResponseRequest("resp_2", history=[HistoryTurn("user", "")], modalities=("text",))
    )
    await driver.wait_for(OutputKind.RESPONSE_DONE, response_id="resp_2")
    await driver.wait_for(OutputKind.RESPONSE_DONE, response_id="resp_1")
    await driver.close()
    assert driver.text("resp_1") == responder.OPENING
    assert driver.text("resp_2") == responder.NOT_HEARD  # the user spoke, but nothing was understood


async def test_an_unreachable_language_model_fails_the_response_with_its_code(cascade: Any) -> None:
    cascade.use_llm("http://127.0.0.1:9/v1", "tiny")
    try:
        stream = await cascade.open("s7", StreamConfig(turn_detection=None))
    finally:
        cascade.use_llm(None, None)
    driver = Driver(stream)
    history = [HistoryTurn("user", "Hello?")]
    await stream.respond(3, ResponseRequest("resp_1", history=history, modalities=("text",)))
    done = await driver.wait_for(OutputKind.RESPONSE_DONE)
    [error] = driver.of(OutputKind.ERROR)
    await driver.close()
    assert driver.text("resp_1") == ""  # no apology that a client would take for an answer
    assert (error.code, error.response_id, error.epoch) == ("llm_failed", "resp_1", 3)
    assert "cannot reach" in error.text
    assert done.status == "failed" and done.epoch == 3


async def test_bad_input_is_refused_and_changes_nothing(
    cascade: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cascade_stream, "MAX_BUFFER_S", 1)
    stream = await cascade.open("s8", StreamConfig(turn_detection=TurnDetection(silence_duration_ms=2000)))
    driver = Driver(stream)
    with pytest.raises(InvalidRequest, match="whole PCM16 samples"):
        await stream.append(1, b"\x00" * 641)
    speech = speak_as_user(cascade, "Repeat after me, one two three four five six seven.", 0.0, 0.0)
    with pytest.raises(CapacityExceeded, match="commit or clear"):
        await driver.say(1, speech)
    await stream.clear(1)
    await driver.say(1, speech[:16_000])  # accepted again after the clear
    await driver.close()
    with pytest.raises(InvalidState, match="closed"):
        await stream.append(1, b"\x00\x00")


async def test_a_long_answer_is_synthesised_only_a_little_ahead_of_real_time(cascade: Any) -> None:
    # Synthesised all at once, a 600-word answer held a core for its whole length and other
    # sessions' first audio waited on the CPU; paced, it costs a second or so in every ten.
    words = " ".join(["the quick brown fox jumps over the lazy dog"] * 67)
    stream = await cascade.open("s9", StreamConfig(turn_detection=None))
    driver = Driver(stream)
    await stream.respond(1, ResponseRequest("resp_1", history=[HistoryTurn("user", f"say {words}")]))
    first = await driver.wait_for(OutputKind.AUDIO_DELTA)
    await asyncio.sleep(6.0)
    elapsed = time.perf_counter() - first_arrival(driver, first)
    spoken_s = len(driver.audio("resp_1")) / 48_000
    assert not driver.of(OutputKind.RESPONSE_DONE)  # four minutes of speech are not done in six seconds
    await driver.close()
    piece_s = 15.0  # the longest piece, 200 characters, is about 13 s of speech
    assert spoken_s <= elapsed + speaking.MAX_AHEAD_S + 2 * piece_s


def first_arrival(driver: Driver, output: Any) -> float:
    return driver.arrived[driver.outputs.index(output)]
