"""``moshi-tiny`` (Moshi's stock transformers classes, tiny and random) served end to end, both transports.

A real server runs ``--voice-model moshi-tiny`` through the frame clock; the
official openai SDK drives the WebSocket, and posts a WebRTC call's offer
(``realtime.calls.create``) for an aiortc caller. The tiny model's speech is
noise and its inner text random letters, and it talks nearly all the time:
what is checked is the mapping of its turns to the Realtime API (docs/voice-protocol.md,
"Native duplex (lockstep) models"), not what it says.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from typing import Any

import pytest
from openai import AsyncOpenAI

from livegen.server.thread import ServerThread
from voice.lockstep_double import pcm

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture
def moshi_server(start_server: Callable[..., ServerThread]) -> ServerThread:
    server = start_server(voice_model="moshi-tiny", world_model="none")
    server.wait_ready(timeout=180)
    return server


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def until(connection: Any, done: Callable[[Any], bool], limit: int = 3000) -> list[Any]:
    events = []
    for _ in range(limit):
        event = await asyncio.wait_for(connection.recv(), 30)
        events.append(event)
        if done(event):
            return events
    raise AssertionError(f"not found in {[e.type for e in events]}")


async def test_moshi_tiny_over_the_websocket_speaks_and_a_talk_over_cancels_it(
    moshi_server: ServerThread,
) -> None:
    sdk = AsyncOpenAI(
        api_key="unused",
        base_url=f"{moshi_server.http_url}/v1",
        websocket_base_url=f"{moshi_server.ws_url}/v1",
    )
    async with sdk.realtime.connect(model="moshi-tiny") as connection:
        created = (await until(connection, lambda e: e.type == "session.created"))[-1]
        assert created.session.model_extra["capabilities"]["frame_ms"] == 80.0
        for _ in range(5):  # audio in: the model hears it frame by frame
            await connection.input_audio_buffer.append(audio=b64(pcm(80, False)))
        for _ in range(3):  # the random model may yield by itself just before the talk-over
            events = await until(connection, lambda e: e.type == "response.output_audio_transcript.delta")
            events += await until(connection, lambda e: e.type == "response.output_audio.delta")
            response_id = events[-1].response_id
            for _ in range(4):  # the user talks over the model
                await connection.input_audio_buffer.append(audio=b64(pcm(80, True)))
            events += await until(connection, lambda e: e.type == "response.done")
            if events[-1].response.status == "cancelled":
                break
        done = events[-1]
        assert done.response.status == "cancelled" and done.response.id == response_id
        assert done.response.status_details.reason == "turn_detected"
        assert "input_audio_buffer.speech_started" in [e.type for e in events]
        truncated = next(e for e in events if e.type == "conversation.item.truncated")
        assert truncated.item_id == done.response.output[0].id  # history cut to what was heard
        assert done.response.output[0].status == "incomplete"


async def test_moshi_tiny_over_webrtc_speaks_on_the_track_and_a_talk_over_cancels_it(
    moshi_server: ServerThread,
) -> None:
    from server.test_voice_duplex import SdkCaller

    caller = SdkCaller(moshi_server.http_url, None)
    try:
        await caller.connect()
        await caller.event("session.created")
        caller.microphone.say(pcm(400, False))
        ended: set[str] = set()
        for _ in range(3):  # the random model may yield by itself just before the talk-over
            words = await caller.wait_for(
                lambda e: (
                    e["type"] == "response.output_audio_transcript.delta" and e["response_id"] not in ended
                ),
                what="words of a live response",
            )
            caller.microphone.say(pcm(300, True) + pcm(600, False))  # talk over it
            response_id = words["response_id"]
            done = await caller.wait_for(
                lambda e, rid=response_id: e["type"] == "response.done" and e["response"]["id"] == rid,
                what="the response's end",
            )
            ended.add(response_id)
            if done["response"]["status"] == "cancelled":
                break
        assert done["response"]["status"] == "cancelled"
        assert done["response"]["status_details"]["reason"] == "turn_detected"
        truncated = await caller.event("conversation.item.truncated")
        assert truncated["item_id"] == done["response"]["output"][0]["id"]
        assert caller.frames  # its audio came on the track
    finally:
        await caller.close()
