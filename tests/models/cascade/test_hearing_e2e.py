"""Hearing through the real server and the official OpenAI SDK: noise reduction, barge-in.

The server is ``livegen serve``'s app with its default voice model (the
cascade) on a loopback port; the microphone streams 20 ms every 20 ms, speech
in a voice unlike the assistant's and silence between.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from openai import AsyncOpenAI

from livegen.server.thread import ServerThread
from models.cascade.support import RealtimeCall, speak_afresh, wire_audio

pytestmark = pytest.mark.slow


def sdk(server: ServerThread) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key="unused", base_url=f"{server.http_url}/v1", websocket_base_url=f"{server.ws_url}/v1"
    )


def cough(seconds: float = 0.3, rate: int = 24_000) -> bytes:
    """A cough-like burst: loud noise that dies away, as the wire carries it."""
    n = int(seconds * rate)
    burst = np.random.default_rng(5).standard_normal(n) * np.exp(-np.linspace(0, 5, n))
    return (0.6 * burst / np.max(np.abs(burst)) * 32767).astype("<i2").tobytes()


async def test_noise_reduction_is_echoed_and_a_bad_type_refused(default_server: ServerThread) -> None:
    async with sdk(default_server).realtime.connect(model="gpt-realtime") as connection:
        await connection.recv()  # session.created
        reduction = {"type": "far_field"}
        await connection.session.update(
            session={"type": "realtime", "audio": {"input": {"noise_reduction": reduction}}}
        )
        updated = await connection.recv()
        await connection.session.update(
            session={"type": "realtime", "audio": {"input": {"noise_reduction": {"type": "loud"}}}}
        )
        error = await connection.recv()
        await connection.session.update(session={"type": "realtime", "audio": {"input": {}}})
        kept = await connection.recv()
    assert updated.type == "session.updated"
    assert updated.session.audio.input.noise_reduction.type == "far_field"
    assert error.type == "error"
    assert error.error.code == "invalid_value"
    assert error.error.param == "session.audio.input.noise_reduction.type"
    assert kept.session.audio.input.noise_reduction.type == "far_field"  # an update is partial


async def test_with_noise_reduction_a_cough_over_the_answer_does_not_interrupt_it(
    default_server: ServerThread, cascade: Any
) -> None:
    """... but a question does, through the gate: noise reduction turns the barge-in gate on, and
    the question must get past its check of the words (``test_barge_in.py`` holds a backchannel
    with the gate and not without it)."""
    async with sdk(default_server).realtime.connect(model="gpt-realtime") as connection:
        reduction = {"type": "near_field"}
        await connection.session.update(
            session={"type": "realtime", "audio": {"input": {"noise_reduction": reduction}}}
        )
        call = RealtimeCall(connection)
        await call.wait_for("session.updated")
        call.say(wire_audio(cascade, "What can you do?"))
        first = await call.wait_for("response.created")
        await call.wait_for("response.output_audio.delta", response_id=first.response.id)
        mark = len(call.events)
        # Backchannels are left to ``livegen bench voice-barge-in``, which counts them: the gate
        # stops most but not all (an espeak "mm-hmm" long enough to reach the 800 ms hold starts
        # a turn).
        call.say(bytes(2 * 12_000) + cough() + bytes(2 * 24_000))
        call.say(speak_afresh("Wait, what time is it?", 0.0, 0.0, "en-us+f3", 24_000))
        cancelled = await call.wait_for("response.done", response__id=first.response.id)
        second = await call.wait_for("response.done", after=mark, response__status="completed")
        await call.close()
    assert cancelled.response.status == "cancelled"
    assert cancelled.response.status_details.reason == "turn_detected"
    after = call.events[mark:]
    # One speech start over the answer: the question's. The cough made no turn.
    assert len([e for e in after if e.type == "input_audio_buffer.speech_started"]) == 1
    transcripts = [e.transcript for e in after if e.type.endswith("input_audio_transcription.completed")]
    assert len(transcripts) == 1 and "time" in transcripts[0].lower()
    answer = "".join(
        e.delta
        for e in call.of("response.output_audio_transcript.delta")
        if e.response_id == second.response.id
    )
    assert answer.startswith("It's ")


@pytest.mark.parametrize("include", [True, False])
async def test_transcription_logprobs_come_when_include_asks_for_them(
    default_server: ServerThread, cascade: Any, include: bool
) -> None:
    session: dict[str, Any] = {
        "type": "realtime",
        "audio": {"input": {"transcription": {"model": "whisper-1"}}},
    }
    if include:
        session["include"] = ["item.input_audio_transcription.logprobs"]
    async with sdk(default_server).realtime.connect(model="gpt-realtime") as connection:
        await connection.session.update(session=session)
        call = RealtimeCall(connection)
        updated = await call.wait_for("session.updated")
        call.say(wire_audio(cascade, "What is seven plus five?"))
        completed = await call.wait_for("conversation.item.input_audio_transcription.completed")
        await call.close()
    if not include:
        assert completed.logprobs is None
        return
    assert updated.session.include == ["item.input_audio_transcription.logprobs"]
    tokens = completed.logprobs
    assert "".join(t.token for t in tokens).strip() == completed.transcript
    assert all(t.logprob <= 0 and bytes(t.bytes).decode() == t.token for t in tokens)
    assert any(t.logprob < 0 for t in tokens)
