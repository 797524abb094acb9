"""Clients written for the beta Realtime API: the SDK's ``beta.realtime.connect`` against a real server.

It sends ``OpenAI-Beta: realtime=v1`` and flat beta session fields, and
expects beta event names back (``response.audio.delta``); GA clients on the
same server are unaffected (``test_realtime_sdk.py``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import pytest
import websockets

from livegen.server.thread import ServerThread
from server.test_voice_sdk import client, pcm24, until
from voice.scripted import registry


@pytest.fixture
def voice_server(start_server: Callable[..., ServerThread]) -> ServerThread:
    server = start_server(registry=registry(), voice_model="scripted-voice", world_model="none")
    server.wait_ready(timeout=30)
    return server


async def test_a_beta_client_gets_a_whole_turn_in_beta_names(voice_server: ServerThread) -> None:
    async with client(voice_server).beta.realtime.connect(model="scripted-voice") as connection:
        created = (await until(connection, "session.created"))[-1]
        assert created.session.input_audio_format == "pcm16"
        assert created.session.turn_detection is not None
        await connection.session.update(session={"turn_detection": None, "input_audio_format": "pcm16"})
        updated = (await until(connection, "session.updated"))[-1]
        assert updated.session.turn_detection is None
        for _ in range(5):
            await connection.input_audio_buffer.append(audio=pcm24(100))
        await connection.input_audio_buffer.commit()
        await until(connection, "conversation.item.created")
        await connection.response.create()
        events = await until(connection, "response.done")
    kinds = [e.type for e in events]
    assert "response.audio.delta" in kinds and "response.audio_transcript.done" in kinds
    assert not [k for k in kinds if "output_audio" in k or k == "conversation.item.added"]
    audio = b"".join(base64.b64decode(e.delta) for e in events if e.type == "response.audio.delta")
    assert len(audio) == 2 * 24 * 600
    transcript = "".join(e.delta for e in events if e.type == "response.audio_transcript.delta")
    assert transcript == "hello from livegen"
    assert events[-1].response.output[0].content[0].type == "audio"


async def test_the_beta_subprotocol_asks_for_the_beta_dialect_too(voice_server: ServerThread) -> None:
    url = f"{voice_server.ws_url}/v1/realtime?model=scripted-voice"
    offered = [websockets.Subprotocol("realtime"), websockets.Subprotocol("openai-beta.realtime-v1")]
    async with websockets.connect(url, subprotocols=offered) as ws:
        created = json.loads(await ws.recv())
        assert created["type"] == "session.created"
        assert created["session"]["output_audio_format"] == "pcm16"
        assert created["session"]["audio"]["output"]["format"]["type"] == "audio/pcm"  # GA fields kept
