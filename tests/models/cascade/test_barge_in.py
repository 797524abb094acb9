"""Barge-in over a playing answer: who gets the gate, the detector's hold, what counts as a backchannel.

Mostly pure parts (``vad.Turns`` fed probabilities, ``barge_in.Gate`` with a
stand-in recogniser, ``barge_in.is_backchannel``); one test speaks over a real
stream's answer to show that a default session is not held. The whole path,
spoken audio over a real server's answer, is in ``test_hearing_e2e.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from livegen.models.cascade import asr, barge_in, vad
from livegen.models.voice import HistoryTurn, OutputKind, ResponseRequest, StreamConfig, TurnDetection
from models.cascade.support import Driver, speak_as_user

SEMANTIC = TurnDetection(eagerness="auto")


def feed(turns: vad.Turns, pattern: str) -> list[vad.Turn]:
    """One 32 ms frame per character: ``#`` speech, ``.`` silence."""
    events: list[vad.Turn] = []
    for mark in pattern:
        events += turns.feed(0.9 if mark == "#" else 0.05)
    return events


def test_only_a_session_that_asks_for_noise_reduction_or_semantic_vad_gets_the_gate() -> None:
    assert not barge_in.is_wanted(StreamConfig())  # server_vad: barge-in as fast as ever
    assert not barge_in.is_wanted(StreamConfig(turn_detection=None))
    assert barge_in.is_wanted(StreamConfig(noise_reduction="near_field"))
    assert barge_in.is_wanted(StreamConfig(noise_reduction="far_field", turn_detection=None))
    assert barge_in.is_wanted(StreamConfig(turn_detection=SEMANTIC))


@pytest.mark.parametrize("is_on", [False, True])
def test_the_gate_holds_speech_over_an_answer_only_when_the_session_opted_in(is_on: bool) -> None:
    gate = barge_in.Gate(_unused, _unused, asyncio.ensure_future)
    gate.is_on = is_on
    gate.playing(100.0)  # an answer plays until 100.5 s
    turns = vad.Turns(TurnDetection())
    assert gate.hold(turns, now=50.0) == []
    events = feed(turns, "...###")
    if is_on:
        assert events == [] and turns.held is not None
    else:  # the first speech frame barges in, not held for words
        assert [t.event for t in events] == [vad.Event.SPEECH_STARTED] and turns.held is None
    # Once the answer has played out, nothing is held either way.
    after = vad.Turns(TurnDetection())
    gate.hold(after, now=101.0)
    assert [t.event for t in feed(after, "...#")] == [vad.Event.SPEECH_STARTED]


async def _unused(*args: Any) -> Any:
    raise AssertionError("no check runs here")


def test_a_short_sound_over_an_answer_starts_nothing_and_is_forgotten() -> None:
    turns = vad.Turns(TurnDetection())
    turns.min_speech_ms = barge_in.MAX_HOLD_MS
    assert feed(turns, "...########" + "." * 20) == []  # 256 ms of "speech", then 640 ms of silence
    assert turns.held is None and not turns.is_speaking
    # Without the hold, the same sound starts a segment at its first frame.
    assert [t.event for t in feed(vad.Turns(TurnDetection()), "...########")] == [vad.Event.SPEECH_STARTED]


def test_held_speech_starts_from_its_first_frame_once_long_enough_or_released() -> None:
    settings = TurnDetection(prefix_padding_ms=0)
    turns = vad.Turns(settings)
    turns.min_speech_ms = barge_in.MAX_HOLD_MS
    frames = barge_in.MAX_HOLD_MS // vad.FRAME_MS
    events = feed(turns, "..." + "#" * frames)
    assert events == [vad.Turn(vad.Event.SPEECH_STARTED, 3 * vad.FRAME_SAMPLES)]
    released = vad.Turns(settings)
    released.min_speech_ms = barge_in.MAX_HOLD_MS
    assert feed(released, "..####") == []
    assert released.held is not None
    assert released.release() == [vad.Turn(vad.Event.SPEECH_STARTED, 2 * vad.FRAME_SAMPLES)]
    assert released.is_speaking and released.held is None


def test_backchannels_and_sound_labels_are_not_words() -> None:
    for text in ("Mm-hmm.", "Uh-huh", " mm", "M", "Yeah.", "Okay, okay.", "(coughs)", "[BLANK_AUDIO]", ""):
        assert barge_in.is_backchannel(text), text
    for text in ("Stop.", "Wait, what time is it?", "Mm-hmm, but what about Tuesday?"):
        assert not barge_in.is_backchannel(text), text


def test_whispers_stutter_of_a_hum_is_a_backchannel_and_other_hyphenated_words_are_not() -> None:
    """What Whisper wrote for espeak's "mm-hmm" and "uh-huh" heard 0.5 s in, over an answer."""
    for text in ("Mm-mm-mm-mm-", "Mm-m-m-m-", "Mm-huh.", "Mm-hmm. Mm-", "uh-uh-huh"):
        assert barge_in.is_backchannel(text), text
    for text in ("A well-known place.", "Mm-hmm, no.", "Uh-oh-stop"):
        assert not barge_in.is_backchannel(text), text


async def test_the_gate_releases_held_speech_only_for_words_whisper_is_sure_of() -> None:
    """Whisper's guesses on a hum are words too ("Damn."), but unsure ones: they do not barge in."""
    heard: dict[str, Any] = {"text": "", "logprob": 0.0}

    async def transcribe(audio: np.ndarray) -> str:
        return str(heard["text"])

    async def score(audio: np.ndarray, text: str) -> list[asr.Logprob]:
        return [asr.Logprob(word, float(heard["logprob"])) for word in text.split()]

    async def verdict(text: str, logprob: float) -> bool:
        heard.update(text=text, logprob=logprob)
        gate = barge_in.Gate(transcribe, score, asyncio.ensure_future)
        turns = vad.Turns(TurnDetection())
        turns.min_speech_ms = barge_in.MAX_HOLD_MS
        feed(turns, "#" * (barge_in.CHECK_MS // vad.FRAME_MS))
        gate.step(turns, lambda start: np.zeros(1, np.float32))
        await asyncio.sleep(0.01)
        return gate.take(turns)

    assert await verdict("Stop.", -0.4)
    assert not await verdict("Damn.", barge_in.MIN_MEAN_LOGPROB - 0.5)
    assert not await verdict("Mm-hmm.", -0.1)
    assert await verdict("Stop.", barge_in.MIN_MEAN_LOGPROB - 0.5)  # a command, however unsure


def gated_append(gate: barge_in.Gate, turns: vad.Turns, pattern: str) -> list[vad.Turn]:
    """One append over a playing answer, as the stream makes it: hold, feed, step."""
    events = gate.hold(turns, now=0.0)
    events += feed(turns, pattern)
    gate.step(turns, lambda start: np.zeros(1, np.float32))
    return events


@pytest.mark.parametrize(("logprob", "starts"), [(-0.2, True), (barge_in.MIN_MEAN_LOGPROB_WHOLE - 1, False)])
async def test_a_held_segment_waits_for_its_verdict_however_slow_the_decode(
    logprob: float, starts: bool
) -> None:
    """A busy machine's decode outlasting ``HOLD_GAP_MS`` of silence: the held words still barge
    in once Whisper is sure of them (they were dropped before the verdict came), and still do not
    when it is unsure."""
    decoded = asyncio.Event()

    async def transcribe(audio: np.ndarray) -> str:
        await decoded.wait()
        return "what time is it"

    async def score(audio: np.ndarray, text: str) -> list[asr.Logprob]:
        return [asr.Logprob(word, logprob) for word in text.split()]

    gate = barge_in.Gate(transcribe, score, asyncio.ensure_future)
    gate.is_on, gate.playing_until = True, float("inf")
    turns = vad.Turns(TurnDetection())
    assert gated_append(gate, turns, "#" * (barge_in.CHECK_MS // vad.FRAME_MS)) == []  # a check runs
    for _ in range(2 * vad.HOLD_GAP_MS // vad.FRAME_MS):  # silence, far past the gap
        assert gated_append(gate, turns, ".") == []
    assert turns.held is not None, "dropped while its check was deciding"
    decoded.set()
    await asyncio.sleep(0.01)
    events = [t.event for t in gated_append(gate, turns, ".")]
    assert (vad.Event.SPEECH_STARTED in events) is starts
    if not starts:
        for _ in range(2):
            gated_append(gate, turns, ".")
        assert turns.held is None, "an unsure verdict lets the sound go"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("config", "is_held"),
    [
        (StreamConfig(), False),
        (StreamConfig(noise_reduction="near_field"), True),
        (StreamConfig(turn_detection=SEMANTIC), True),
    ],
    ids=["default", "near_field", "semantic_vad"],
)
async def test_a_default_session_barges_in_at_the_first_sound_over_the_answer(
    cascade: Any, config: StreamConfig, is_held: bool
) -> None:
    """The first 300 ms of a "mm-hmm" over the answer: a default session starts a segment (and so
    barges in) at once; one that opted in holds it, and with no more audio it never starts."""
    sound = speak_as_user(cascade, "Mm-hmm.", lead_s=0.1, trail_s=0.0)
    stream = await cascade.open("gate", config)
    driver = Driver(stream)
    history = [HistoryTurn("user", "What can you do?")]
    await stream.respond(1, ResponseRequest("resp_1", history=history))
    await driver.wait_for(OutputKind.AUDIO_DELTA, response_id="resp_1")
    await driver.say(1, sound[: 2 * int(0.4 * 16_000)])  # 100 ms of silence, 300 ms of the sound
    if is_held:
        await asyncio.sleep(1.0)  # time for a check of the held sound to come back
        assert not driver.of(OutputKind.SPEECH_STARTED)
    else:
        started = await driver.wait_for(OutputKind.SPEECH_STARTED, within=10)
        assert started.audio_ms <= 400
    await driver.close()
