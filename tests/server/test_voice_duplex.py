"""Native duplex (lockstep) sessions over the wire: the official openai SDK against a real server.

The server serves the deterministic lockstep double (``tests/voice/lockstep_double.py``)
through the frame clock (``runtime/voice/lockstep.py``): the model answers on its
own after it heard speech and then silence, and the session maps its turns to
Realtime responses (docs/voice-protocol.md, "Native duplex (lockstep) models").
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from openai import AsyncOpenAI

from livegen.server.thread import ServerThread
from voice.lockstep_double import LockstepDouble, pcm, registry


@pytest.fixture
def duplex_server(start_server: Callable[..., ServerThread]) -> ServerThread:
    server = start_server(registry=registry(), voice_model="duplex-double", world_model="none")
    server.wait_ready(timeout=30)
    return server


def model_of(server: ServerThread, name: str = "duplex-double") -> LockstepDouble:
    service = next(s for s in server.app.state.livegen.services if s.name == "voice")
    model: LockstepDouble = service.engine.models[name].model
    return model


def client(server: ServerThread) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key="unused", base_url=f"{server.http_url}/v1", websocket_base_url=f"{server.ws_url}/v1"
    )


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def speak(connection: Any, loud_ms: int = 300, quiet_ms: int = 600) -> None:
    """Speech, then silence, in 40 ms appends (the model's frame)."""
    for ms, loud in ((loud_ms, True), (quiet_ms, False)):
        for _ in range(ms // 40):
            await connection.input_audio_buffer.append(audio=b64(pcm(40, loud)))


async def until(connection: Any, last: str, limit: int = 2000) -> list[Any]:
    events = []
    for _ in range(limit):
        event = await asyncio.wait_for(connection.recv(), 20)
        events.append(event)
        if event.type == last:
            return events
    raise AssertionError(f"no {last} in {[e.type for e in events]}")


def types(events: list[Any]) -> list[str]:
    return [e.type for e in events]


async def test_the_model_answers_on_its_own_with_audio_and_transcript(duplex_server: ServerThread) -> None:
    async with client(duplex_server).realtime.connect(model="duplex-double") as connection:
        created = await connection.recv()
        assert created.type == "session.created"
        capabilities = created.session.model_extra["capabilities"]
        assert capabilities["duplex"] == "native" and capabilities["frame_ms"] == 40.0
        assert capabilities["model_initiated_responses"] and not capabilities["response_create"]
        await speak(connection)
        events = await until(connection, "response.done")
        names = types(events)
        assert names.index("input_audio_buffer.speech_started") < names.index("response.created")
        assert "input_audio_buffer.speech_stopped" in names
        assert names.index("response.created") < names.index("response.output_item.added")
        audio = b"".join(base64.b64decode(e.delta) for e in events if e.type == "response.output_audio.delta")
        transcript = "".join(e.delta for e in events if e.type == "response.output_audio_transcript.delta")
        done = events[-1]
        assert done.response.status == "completed"
        assert transcript == "w0 w1 w2 w3 w4 "  # one word every 5 of its 25 speaking frames
        # Its 25 speaking frames and the 8 of its yield (320 ms), 40 ms each, at 24 kHz.
        assert len(audio) == (25 + 8) * 960 * 2
        assert np.abs(np.frombuffer(audio[: 960 * 2], "<i2")).max() > 1000  # its tone, not silence
