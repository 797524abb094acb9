"""Transcription ``keywords`` steer the recogniser, over the wire, through the official SDK.

gpt-realtime-2's ``audio.input.transcription.keywords`` name words the input
may hold; livegen gives them to Whisper in its prompt, where a name's spelling
becomes the likely one. The name here is one Whisper mishears without help
("Siobhan" as "she vone"); the audio is espeak-ng's, made afresh each run.
``delay`` is echoed and bounded here (its caption cadence is
``models/cascade/captions.py``'s).
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from openai import AsyncOpenAI

from livegen.server.thread import ServerThread
from models.cascade.support import speak_afresh

pytestmark = pytest.mark.slow


def _sdk(server: ServerThread) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key="unused", base_url=f"{server.http_url}/v1", websocket_base_url=f"{server.ws_url}/v1"
    )


def _session(**transcription: Any) -> dict[str, Any]:
    transcription = {"model": "whisper-1", **transcription}
    return {"type": "realtime", "audio": {"input": {"transcription": transcription, "turn_detection": None}}}


async def _transcript(connection: Any, pcm24: bytes) -> str:
    await connection.input_audio_buffer.append(audio=base64.b64encode(pcm24).decode())
    await connection.input_audio_buffer.commit()
    async for event in connection:
        if event.type == "conversation.item.input_audio_transcription.completed":
            return str(event.transcript)
        assert event.type != "error", event
    raise AssertionError("the connection closed before the transcript")


async def _heard(server: ServerThread, pcm24: bytes, **transcription: Any) -> tuple[Any, str]:
    async with _sdk(server).realtime.connect(model="gpt-realtime-2") as connection:
        assert (await connection.recv()).type == "session.created"
        await connection.session.update(session=_session(**transcription))  # type: ignore[arg-type]
        updated = await connection.recv()
        assert updated.type == "session.updated", updated
        return updated, await _transcript(connection, pcm24)


async def test_keywords_steer_the_recogniser_and_delay_is_taken(default_server: ServerThread) -> None:
    speech = speak_afresh("Please call Siobhan tomorrow.", rate=24_000)
    _, plain = await _heard(default_server, speech)
    updated, steered = await _heard(default_server, speech, keywords=["Siobhan"], delay="high")
    assert "siobhan" not in plain.lower(), plain  # what makes the keyword the difference
    assert "siobhan" in steered.lower(), steered
    transcription = updated.session.audio.input.transcription
    assert (transcription.keywords, transcription.delay) == (["Siobhan"], "high")


async def test_an_unknown_delay_is_refused_by_name(default_server: ServerThread) -> None:
    async with _sdk(default_server).realtime.connect(model="gpt-realtime-2") as connection:
        assert (await connection.recv()).type == "session.created"
        await connection.session.update(session=_session(delay="slow"))  # type: ignore[arg-type]
        refused = await connection.recv()
    assert refused.type == "error", refused
    assert (refused.error.code, refused.error.param) == (
        "invalid_value",
        "session.audio.input.transcription.delay",
    )
    assert "'xhigh'" in refused.error.message
