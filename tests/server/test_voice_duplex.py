"""Native duplex (lockstep) sessions over the wire: the official openai SDK against a real server.

The server serves the deterministic lockstep double (``tests/voice/lockstep_double.py``)
through the frame clock (``runtime/voice/lockstep.py``): the model answers on its
own after it heard speech and then silence, and the session maps its turns to
Realtime responses (docs/voice-protocol.md, "Native duplex (lockstep) models").
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from openai import AsyncOpenAI

from livegen.client.webrtc import Caller, loudness
from livegen.server.thread import ServerThread
from voice.lockstep_double import POISON, LockstepDouble, pcm, registry


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


async def test_talking_over_the_model_cancels_its_response_and_cuts_history(
    duplex_server: ServerThread,
) -> None:
    async with client(duplex_server).realtime.connect(model="duplex-double") as connection:
        await until(connection, "session.created")
        await speak(connection)
        heard = await until(connection, "response.output_audio_transcript.delta")
        for _ in range(5):  # the user talks over the answer
            await connection.input_audio_buffer.append(audio=b64(pcm(40, True)))
        events = heard + await until(connection, "response.done")
        done = events[-1]
        assert done.response.status == "cancelled"
        assert done.response.status_details.reason == "turn_detected"
        names = types(events)
        assert (
            names.index("input_audio_buffer.speech_started", names.index("response.created")) < len(names) - 1
        )
        truncated = next(e for e in events if e.type == "conversation.item.truncated")
        sent_ms = sum(
            len(base64.b64decode(e.delta)) / 48 for e in events if e.type == "response.output_audio.delta"
        )
        assert truncated.audio_end_ms <= sent_ms < 33 * 40  # cut where heard, short of the whole turn
        await connection.conversation.item.retrieve(item_id=truncated.item_id)
        item = (await until(connection, "conversation.item.retrieved"))[-1].item
        said = "".join(e.delta for e in events if e.type == "response.output_audio_transcript.delta")
        assert said.startswith(item.content[0].transcript) and item.status == "incomplete"
        # What the model still says of the cut turn (it talks on for its second) is no new
        # response: the next one follows the user's next turn, once the model has stopped.
        await asyncio.sleep(1.5)
        await speak(connection)
        later = await until(connection, "response.done")
        assert types(later).count("response.created") == 1 and later[-1].response.status == "completed"


async def test_what_the_model_cannot_honour_is_refused_by_name_and_the_session_goes_on(
    duplex_server: ServerThread,
) -> None:
    async with client(duplex_server).realtime.connect(model="duplex-double") as connection:
        await until(connection, "session.created")
        await connection.response.create()
        error = (await until(connection, "error"))[-1].error
        assert (error.code, error.param) == ("unsupported_parameter", "type")
        assert "'response.create'" in error.message
        await connection.session.update(
            session={"type": "realtime", "audio": {"input": {"turn_detection": None}}}
        )
        error = (await until(connection, "error"))[-1].error
        assert (error.code, error.param) == ("unsupported_parameter", "session.audio.input.turn_detection")
        await connection.session.update(session={"type": "realtime", "instructions": "be brief"})
        error = (await until(connection, "error"))[-1].error
        assert (error.code, error.param) == ("unsupported_parameter", "session.instructions")
        await connection.session.update(
            session={
                "type": "realtime",
                "audio": {"input": {"turn_detection": {"type": "server_vad", "threshold": 0.6}}},
            }
        )
        error = (await until(connection, "error"))[-1].error  # the model owns its turns
        assert (error.code, error.param) == ("unsupported_parameter", "session.audio.input.turn_detection")
        await connection.session.update(
            session={"type": "realtime", "turn_detection": {"type": "server_vad"}}
        )
        error = (await until(connection, "error"))[-1].error  # the beta shape's field too
        assert (error.code, error.param) == ("unsupported_parameter", "session.turn_detection")
        await speak(connection)
        assert (await until(connection, "response.done"))[-1].response.status == "completed"


async def test_one_sessions_bad_frame_ends_that_session_only(duplex_server: ServerThread) -> None:
    factory = client(duplex_server)
    async with (
        factory.realtime.connect(model="duplex-double") as good,
        factory.realtime.connect(model="duplex-double") as bad,
    ):
        await until(good, "session.created")
        await until(bad, "session.created")
        poisoned = np.zeros(960, "<i2")
        poisoned[0] = POISON
        await bad.input_audio_buffer.append(audio=b64(poisoned.tobytes()))
        await speak(good)
        error = (await until(bad, "error"))[-1].error
        assert error.code == "model_error" and "poisoned" in error.message
        assert (await until(good, "response.done"))[-1].response.status == "completed"
    model = model_of(duplex_server)
    assert model.threads and all(name.startswith("livegen-lockstep") for name in model.threads)
    # The poisoned batch of two was bisected: the good session's frame was stepped again alone.
    pair = next(slots for slots in model.raised if len(slots) == 2)
    assert [(slot,) for slot in pair] in [model.attempts[i : i + 2] for i in range(len(model.attempts))]
    assert len(model.raised) == 2  # the batch, then the poisoned session's frame alone: never again


async def test_a_session_the_clock_cannot_hold_is_refused_realtime_capacity(
    start_server: Callable[..., ServerThread],
) -> None:
    server = start_server(registry=registry(), voice_model="duplex-one", world_model="none")
    server.wait_ready(timeout=30)
    factory = client(server)
    async with factory.realtime.connect(model="duplex-one") as first:
        await until(first, "session.created")
        async with factory.realtime.connect(model="duplex-one") as second:
            error = (await until(second, "error"))[-1].error
            assert error.code == "realtime_capacity" and "pool is full" in error.message
        call = Caller(server.http_url, None)  # a WebRTC call is refused at its offer, the same way
        try:
            refused = await call.offer()
            assert refused.status_code == 429 and refused.json()["error"]["code"] == "realtime_capacity"
        finally:
            await call.close()
        await speak(first)  # the one held goes on
        assert (await until(first, "response.done"))[-1].response.status == "completed"
    assert await admitted_again(factory)  # its slot came back once its session ended


async def admitted_again(factory: AsyncOpenAI) -> bool:
    """Whether a new session opens (the last one's slot is given back as its session ends, after
    its socket closed: a few tries)."""
    for _ in range(50):
        async with factory.realtime.connect(model="duplex-one") as again:
            if (await again.recv()).type == "session.created":
                return True
        await asyncio.sleep(0.1)
    return False


async def test_a_step_already_at_the_frame_period_refuses_the_next_session(
    start_server: Callable[..., ServerThread],
) -> None:
    server = start_server(registry=registry(), voice_model="duplex-slow", world_model="none")
    server.wait_ready(timeout=30)
    factory = client(server)
    async with factory.realtime.connect(model="duplex-slow") as first:
        await until(first, "session.created")
        model = model_of(server, "duplex-slow")
        for _ in range(400):  # until measured: each step takes longer than a frame
            if len(model.batches) >= 3:
                break
            await asyncio.sleep(0.05)
        async with factory.realtime.connect(model="duplex-slow") as second:
            error = (await until(second, "error"))[-1].error
            assert error.code == "realtime_capacity" and "frame clock is full" in error.message


class SdkCaller(Caller):
    """An aiortc call whose offer the official openai SDK posts (``client.realtime.calls.create``)."""

    async def offer(self, session: dict[str, Any] | None = None) -> Any:
        self.pc.addTrack(self.microphone)
        await self.pc.setLocalDescription(await self.pc.createOffer())
        async with AsyncOpenAI(api_key=self.key or "unused", base_url=f"{self.base_url}/v1") as sdk:
            raw = await sdk.realtime.calls.with_raw_response.create(sdp=self.pc.localDescription.sdp)
            await raw.http_response.aread()
            return raw.http_response


async def test_a_duplex_call_over_webrtc_answers_on_the_track_and_a_talk_over_cancels_it(
    duplex_server: ServerThread,
) -> None:
    caller = SdkCaller(duplex_server.http_url, None)
    try:
        await caller.connect()
        created = await caller.event("session.created")
        assert created["session"]["capabilities"]["duplex"] == "native"
        asked = time.monotonic()
        caller.microphone.say(pcm(300, True) + pcm(600, False))
        first = await caller.event("response.done")
        assert first["response"]["status"] == "completed"
        said = [e["delta"] for e in caller.events if e["type"] == "response.output_audio_transcript.delta"]
        assert "".join(said) == "w0 w1 w2 w3 w4 "
        assert loudness(caller.audio_since(asked)) > 1000  # its answer came on the track
        assert not [e for e in caller.events if e["type"] == "response.output_audio.delta"]
        caller.microphone.say(pcm(300, True) + pcm(600, False))  # ask again ...
        old = first["response"]["id"]
        await caller.wait_for(
            lambda e: e["type"] == "response.output_audio_transcript.delta" and e["response_id"] != old,
            what="the second answer's words",
        )
        caller.microphone.say(pcm(300, True))  # ... and talk over the answer
        cut = await caller.wait_for(
            lambda e: e["type"] == "response.done" and e["response"]["id"] != old,
            what="the second response's end",
        )
        assert cut["response"]["status"] == "cancelled"
        truncated = await caller.event("conversation.item.truncated")
        assert truncated["audio_end_ms"] < 33 * 40
    finally:
        await caller.close()
