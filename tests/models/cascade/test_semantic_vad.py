"""semantic_vad with a real end-of-turn model: Smart Turn v3.2 from the pinned pipecat-ai wheel.

A sentence spoken with a mid-sentence pause ("I would like to ... book a
table for four people.", 800 ms of silence at the ellipsis) goes through a real server and
the official ``openai`` SDK: ``server_vad`` cuts it in two, ``semantic_vad``
hears that "I would like to" goes on and keeps one turn, which still ends
soon after the sentence does. The pure turn logic, the model's input features
and the weight pin are checked on their own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import soxr
from openai import AsyncOpenAI

from livegen.bench.turn_cutoffs import Paused, paused_utterance
from livegen.errors import ConfigError
from livegen.models.cascade import endpoint, vad
from livegen.models.voice import OutputKind, StreamConfig, TurnDetection
from livegen.server.thread import ServerThread
from livegen.voice.turn_detection import SEMANTIC_SILENCE_MS
from models.cascade.support import USER_VOICE, Driver, RealtimeCall, speak_afresh

SEMANTIC = TurnDetection(silence_duration_ms=700, eagerness="auto")
FRAME = vad.FRAME_SAMPLES


def _feed(turns: vad.Turns, probabilities: list[float]) -> list[vad.Turn]:
    return [event for p in probabilities for event in turns.feed(p)]


def _silence_frames(ms: int) -> list[float]:
    return [0.0] * (ms // vad.FRAME_MS)


# -- the turn logic (pure) ----------------------------------------------------------------------


def test_semantic_turns_ask_the_model_at_a_pause_and_wait_up_to_the_maximum() -> None:
    turns = vad.Turns(SEMANTIC, has_endpoint=True)
    events = _feed(turns, [0.9] * 20 + _silence_frames(3000))
    kinds = [e.event for e in events]
    assert kinds.count(vad.Event.CHECK) == 1
    assert vad.Event.SPEECH_STOPPED not in kinds  # 3 s of silence is not yet medium's 4 s
    stopped = _feed(turns, _silence_frames(1100))
    assert [e.event for e in stopped] == [vad.Event.SPEECH_STOPPED]
    assert (stopped[0].sample - turns.last_speech) * 1000 // vad.SAMPLE_RATE >= vad.MAX_WAIT_MS["auto"]


def test_a_complete_verdict_ends_the_turn_unless_the_user_went_on() -> None:
    turns = vad.Turns(SEMANTIC, has_endpoint=True)
    [check] = [e for e in _feed(turns, [0.9] * 20 + _silence_frames(300)) if e.event is vad.Event.CHECK]
    assert check.sample == turns.last_speech
    _feed(turns, [0.9] * 3)  # the user goes on before the verdict arrives: it is stale
    assert turns.complete(check.sample) == []
    [again] = [e for e in _feed(turns, _silence_frames(300)) if e.event is vad.Event.CHECK]
    # The model hears the speech since the pause it was asked about, not the pause again.
    assert check.start == 0 and check.sample < again.start < again.sample
    [stopped] = turns.complete(again.sample)
    assert stopped.event is vad.Event.SPEECH_STOPPED and not turns.is_speaking
    assert turns.complete(again.sample) == []


@pytest.mark.parametrize("eagerness", ["low", "auto", "high"])
def test_semantic_turns_start_recognising_at_a_pause_before_asking_the_model(eagerness: str) -> None:
    # The words heard so far are read at the check: their transcript must have been started.
    config = TurnDetection(silence_duration_ms=SEMANTIC_SILENCE_MS[eagerness], eagerness=eagerness)
    turns = vad.Turns(config, has_endpoint=True)
    kinds = [e.event for e in _feed(turns, [0.9] * 20 + _silence_frames(300))]
    assert vad.Event.PAUSE in kinds and kinds.index(vad.Event.PAUSE) <= kinds.index(vad.Event.CHECK)


def test_without_an_end_of_turn_model_semantic_vad_is_timed_by_its_silence() -> None:
    turns = vad.Turns(SEMANTIC, has_endpoint=False)
    events = _feed(turns, [0.9] * 20 + _silence_frames(800))
    assert vad.Event.CHECK not in [e.event for e in events]
    assert [e.event for e in events][-1] is vad.Event.SPEECH_STOPPED
    server_vad = vad.Turns(TurnDetection(), has_endpoint=True)  # server_vad never asks the model
    assert vad.Event.CHECK not in [e.event for e in _feed(server_vad, [0.9] * 20 + _silence_frames(800))]


# -- the model ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_features_are_the_ones_smart_turn_was_trained_on() -> None:
    # pipecat-ai's own numpy port of transformers' WhisperFeatureExtractor, as reference (tests only).
    from pipecat.audio.turn.smart_turn._whisper_features import compute_whisper_log_mel_features

    rng = np.random.default_rng(7)
    audio = (0.1 * np.sin(np.arange(3 * 16_000) * 0.05) + 0.01 * rng.standard_normal(3 * 16_000)).astype(
        np.float32
    )
    window = np.concatenate([np.zeros(5 * 16_000, np.float32), audio])  # zeros in front, as the model's
    reference = compute_whisper_log_mel_features(window, do_normalize=True)
    ours = endpoint.features(audio)
    assert ours.shape == (1, 80, 800) and ours.dtype == np.float32
    assert np.abs(ours[0] - reference).max() < 1e-3


def test_a_repackaged_smart_turn_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(endpoint, "SMART_TURN", replace(endpoint.SMART_TURN, sha256="0" * 64))
    with pytest.raises(ConfigError, match="sha256"):
        endpoint.model_path()
    with pytest.raises(ConfigError, match="sha256"):
        endpoint.load()


def test_another_pipecat_version_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(endpoint, "SMART_TURN", replace(endpoint.SMART_TURN, version="0.0.1"))
    with pytest.raises(ConfigError, match=r"expects 0\.0\.1"):
        endpoint.model_path()


def test_without_pipecat_there_is_no_model_and_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(endpoint.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="not installed"):
        endpoint.model_path()
    with caplog.at_level(logging.WARNING, "livegen.models.cascade"):
        assert endpoint.load() is None
    assert len(caplog.records) == 1 and "semantic_vad" in caplog.records[0].getMessage()


# -- the words --------------------------------------------------------------------------------


class _AlwaysComplete:
    """A test double of Smart Turn that calls every pause complete: only the words can hold it."""

    async def probability(self, audio: np.ndarray) -> float:
        return 1.0

    def close(self) -> None:
        pass


async def _stop_after_speech_ms(cascade: Any, text: str, silence_s: float) -> int | None:
    """Say ``text`` at the pace of speech under semantic_vad (auto), then ``silence_s`` of silence:
    how long after the speech the turn stopped, or None if it did not."""
    config = StreamConfig(turn_detection=TurnDetection(silence_duration_ms=700, eagerness="auto"))
    driver = Driver(await cascade.open("words", config))
    # From a fresh espeak-ng, in the voice whose "for" Whisper hears: tiny.en hears en-us+f3's
    # "Book a table for" word for word; the male voices come out as "Work at table for it." or
    # "Welcome table 4."
    pcm = speak_afresh(text, lead_s=0.3, trail_s=silence_s, voice="en-us+f3")
    await driver.say(1, pcm, realtime=True)
    await asyncio.sleep(0.2)  # a verdict in flight
    await driver.close()
    samples = np.frombuffer(pcm, "<i2")
    speech_end_ms = int(np.flatnonzero(np.abs(samples) > 100)[-1]) * 1000 // vad.SAMPLE_RATE
    stops = driver.of(OutputKind.SPEECH_STOPPED)
    return stops[0].audio_ms - speech_end_ms if stops else None


@pytest.mark.slow
async def test_a_pause_after_for_is_held_though_the_model_calls_it_complete(
    cascade: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cascade, "endpointer", _AlwaysComplete())
    # "Book a table for": the words cannot end a request; the turn waits for the user (up to 4 s).
    assert await _stop_after_speech_ms(cascade, "Book a table for", 3.0) is None
    # The whole sentence ends the turn at the pause, once its words are recognised.
    ended = await _stop_after_speech_ms(cascade, "Book a table for four people.", 3.0)
    assert ended is not None and ended < vad.MAX_WAIT_MS["auto"]


# -- end to end ---------------------------------------------------------------------------------


@pytest.fixture
def voice_server(start_server: Callable[..., ServerThread], cascade: Any) -> ServerThread:
    assert cascade.endpointer is not None  # pipecat-ai is in the test extra
    server = start_server(world_model="none")
    server.wait_ready(timeout=120)
    return server


def _wire(paused: Paused) -> bytes:
    audio = soxr.resample(paused.audio, 16_000, 24_000)
    return (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()


TRANSCRIBED = "conversation.item.input_audio_transcription.completed"


async def _turns(server: ServerThread, detection: dict[str, Any], paused: Paused) -> RealtimeCall:
    """Say ``paused`` under ``detection``; the call's events until the end of the sentence is heard."""
    sdk = AsyncOpenAI(
        api_key="unused", base_url=f"{server.http_url}/v1", websocket_base_url=f"{server.ws_url}/v1"
    )
    async with sdk.realtime.connect(model="gpt-realtime") as connection:
        call = RealtimeCall(connection)
        turn_detection = {**detection, "create_response": False}
        audio = {"input": {"turn_detection": turn_detection, "transcription": {"model": "whisper-1"}}}
        await connection.session.update(session={"type": "realtime", "audio": audio})
        await call.wait_for("session.updated")
        call.say(_wire(paused))
        deadline = asyncio.get_running_loop().time() + 90
        while not any(_second_part(e.transcript) for e in call.of(TRANSCRIBED)):
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"the sentence's end was not heard: {_heard(call)}")
            await asyncio.sleep(0.05)
        await call.close()
    return call


def _heard(call: RealtimeCall) -> str:
    return "; ".join(f"{e.type} {getattr(e, 'transcript', '')}" for e in call.events if "delta" not in e.type)


def _second_part(transcript: str) -> bool:
    """Whether the words after the pause were heard: tiny.en hears espeak's "book a table" as
    "welcome table" or "we'll enable" in some voices."""
    return any(word in transcript.lower() for word in ("table", "people"))


@pytest.fixture
def pizza(cascade: Any) -> Paused:
    return paused_utterance(cascade, "I would like to", "book a table for four people.", USER_VOICE, 800)


@pytest.mark.slow
async def test_semantic_vad_holds_a_mid_sentence_pause_that_server_vad_cuts(
    voice_server: ServerThread, pizza: Paused
) -> None:
    server_vad = await _turns(voice_server, {"type": "server_vad"}, pizza)
    first, second = [e.transcript.lower() for e in server_vad.of(TRANSCRIBED)]
    assert "like" in first and not _second_part(first) and _second_part(second)

    semantic = await _turns(voice_server, {"type": "semantic_vad", "eagerness": "auto"}, pizza)
    [whole] = [e.transcript.lower() for e in semantic.of(TRANSCRIBED)]
    assert "like" in whole and _second_part(whole)
    # The sentence's real end still ends the turn: the model hears it, well before the maximum wait.
    [started] = semantic.of("input_audio_buffer.speech_started")
    [stopped] = semantic.of("input_audio_buffer.speech_stopped")
    onset = int(np.flatnonzero(np.abs(pizza.audio) > 3e-3)[0])
    speech_end_ms = started.audio_start_ms + 300 + (pizza.speech_end - onset) * 1000 // 16_000
    assert stopped.audio_end_ms - speech_end_ms < vad.MAX_WAIT_MS["auto"] // 2
