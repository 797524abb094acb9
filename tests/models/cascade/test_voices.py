"""OpenAI's voice names speak with distinct voices of both sexes, over the wire.

Sex is told by the voice's median pitch (autocorrelation of voiced 40 ms frames):
OpenAI's female voices (coral, nova, marin) speak well above 150 Hz, its male
ones (alloy: Piper's joe; ash, echo) well below.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
from typing import Any

import numpy as np
import pytest
from openai import AsyncOpenAI, OpenAI

from livegen.server.thread import ServerThread

pytestmark = pytest.mark.slow

RATE = 24_000
FEMALE = ("coral", "nova", "marin")
MALE = ("alloy", "ash", "echo")
TEXT = "Please water the tomato plants before noon."


def pitch_hz(pcm: bytes) -> float:
    """Median fundamental frequency of the voiced frames of 24 kHz PCM16."""
    audio = np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0
    frame, low, high = RATE // 25, RATE // 400, RATE // 60
    found = []
    for start in range(0, len(audio) - frame, frame):
        piece = audio[start : start + frame] - audio[start : start + frame].mean()
        if np.sqrt(np.mean(piece**2)) < 0.02:
            continue
        correlation = np.correlate(piece, piece, "full")[frame - 1 :]
        lag = low + int(np.argmax(correlation[low:high]))
        if correlation[lag] > 0.4 * correlation[0]:
            found.append(RATE / lag)
    return float(np.median(found))


def test_openai_voice_names_speak_with_distinct_voices_of_both_sexes(default_server: ServerThread) -> None:
    with OpenAI(api_key="unused", base_url=f"{default_server.http_url}/v1") as client:
        spoken = {
            voice: client.audio.speech.create(
                model="tts-1", voice=voice, input=TEXT, response_format="pcm"
            ).content
            for voice in (*FEMALE, *MALE)
        }
    assert all(len(pcm) > RATE for pcm in spoken.values())  # over half a second each
    assert all(a != b for a, b in itertools.combinations(spoken.values(), 2))
    pitches = {voice: round(pitch_hz(pcm)) for voice, pcm in spoken.items()}
    assert all(pitches[voice] > 150 for voice in FEMALE), pitches
    assert all(pitches[voice] < 140 for voice in MALE), pitches


async def test_a_session_speaks_with_the_voice_it_names(default_server: ServerThread) -> None:
    client = AsyncOpenAI(
        api_key="unused",
        base_url=f"{default_server.http_url}/v1",
        websocket_base_url=f"{default_server.ws_url}/v1",
    )
    async with client.realtime.connect(model="gpt-realtime") as connection:
        await connection.session.update(session={"type": "realtime", "audio": {"output": {"voice": "coral"}}})
        item = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "What is 3 times 4?"}],
        }
        await connection.conversation.item.create(item=item)
        await connection.response.create()
        audio = bytearray()
        event: Any
        async for event in connection:
            if event.type == "response.output_audio.delta":
                audio += base64.b64decode(event.delta)
            if event.type == "response.done":
                break
    assert event.response.status == "completed"
    assert pitch_hz(bytes(audio)) > 150  # coral, not the default (alloy: Piper's joe, ~90 Hz)


async def test_an_unknown_voice_is_refused_by_name_at_session_update(default_server: ServerThread) -> None:
    client = AsyncOpenAI(
        api_key="unused",
        base_url=f"{default_server.http_url}/v1",
        websocket_base_url=f"{default_server.ws_url}/v1",
    )
    async with client.realtime.connect(model="gpt-realtime") as connection, asyncio.timeout(60):
        await connection.session.update(session={"type": "realtime", "audio": {"output": {"voice": "bob"}}})
        refused = await connection.recv()
        while refused.type not in ("error", "session.updated"):
            refused = await connection.recv()
        assert refused.type == "error", refused
        await connection.session.update(
            session={"type": "realtime", "audio": {"output": {"voice": "shimmer"}}}
        )
        updated = await connection.recv()
        while updated.type != "session.updated":
            updated = await connection.recv()
    assert (refused.error.code, refused.error.param) == ("invalid_value", "session.audio.output.voice")
    assert "'bob'" in refused.error.message and "'alloy'" in refused.error.message
    assert updated.session.audio.output.voice == "shimmer"  # the session goes on, and takes a known one
