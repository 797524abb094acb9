"""GPT-Live over WebRTC through the official ``openai`` SDK (``client.live.create``), with aiortc.

The caller is livegen's aiortc peer (``livegen.client.webrtc.Caller``: a
microphone track and the ``oai-events`` data channel); its offer goes to
livegen through the SDK's ``client.live.create``, unchanged but for its base
URL, and the SDP answer it returns is applied. ``session.started`` must come on
the data channel, the spoken question be answered on the track (audible) with
both transcripts on the channel, every channel event validated by the SDK's
own ``ServerEvent`` union, and a commentary append acknowledged there. Bad
bodies are refused over HTTP in OpenAI's error shape, as ``/v1/realtime/calls``
refuses them. The sideband (``client.live.sideband.connect``, the server's key)
watches a live WebRTC session's events and steers it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import openai
import pytest
import websockets
from aiortc import RTCSessionDescription
from openai import AsyncOpenAI

from conformance.conftest import API_KEY
from conformance.support import QUESTION, until
from conformance.test_openai_live import EVENTS, START, Live, conformance
from livegen.client.webrtc import Caller, mint
from livegen.server.thread import ServerThread


def client(server: ServerThread, key: str = API_KEY) -> AsyncOpenAI:
    return AsyncOpenAI(api_key=key, base_url=f"{server.http_url}/v1")


@asynccontextmanager
async def webrtc_session(server: ServerThread, key: str = API_KEY) -> AsyncIterator[tuple[Caller, str]]:
    """A started GPT-Live session over WebRTC (``client.live.create``): the caller, the session's id."""
    sdk = client(server, key)
    caller = Caller(server.http_url, key)
    try:
        caller.pc.addTrack(caller.microphone)
        await caller.pc.setLocalDescription(await caller.pc.createOffer())
        created = await sdk.live.create(
            session=START, transport={"type": "webrtc", "sdp": caller.pc.localDescription.sdp}
        )
        assert created.session.id.startswith("sess_") and created.transport.type == "webrtc"
        await caller.pc.setRemoteDescription(RTCSessionDescription(sdp=created.transport.sdp, type="answer"))
        started = await caller.event("session.started", within=60)
        assert started["session"]["id"] == created.session.id
        assert started["session"]["model"] == "gpt-live-1"
        yield caller, created.session.id
    finally:
        await caller.close()
        await sdk.close()


def answered(caller: Caller, kind: str) -> str:
    return "".join(e["delta"] for e in caller.events if e["type"] == kind)


@conformance("webrtc")
async def test_a_webrtc_session_starts_on_the_channel_and_answers_on_the_track(
    plain_server: ServerThread, speech: Any
) -> None:
    async with webrtc_session(plain_server) as (caller, _):
        caller.send({"type": "session.commentary.append", "event_id": "c_1", "content": "Greet the user."})
        acked = await caller.event("session.commentary.appended", within=30)
        assert acked["client_event_id"] == "c_1"
        await caller.event("session.usage.updated", within=90)  # the greeting was said, and is over
        since = time.monotonic()
        caller.microphone.say(speech(QUESTION))
        await until(
            lambda: (
                "84" in answered(caller, "session.output_transcript.delta")
                or "eighty" in answered(caller, "session.output_transcript.delta").lower()
            ),
            90,
            "the answer",
        )
        assert answered(caller, "session.input_transcript.delta")  # the user was heard
        await until(lambda: caller.first_loud_after(since) is not None, 30, "the answer on the track")
        assert not [e for e in caller.events if e["type"] == "session.output_audio.delta"]  # on the track
        for event in caller.events:
            EVENTS.validate_python(event)  # the SDK's own types, validated
        assert not [e for e in caller.events if e["type"] == "error"]


@conformance("live-errors")
async def test_bad_webrtc_bodies_are_refused_in_openais_shape(plain_server: ServerThread) -> None:
    sdk = client(plain_server)
    offer = {"type": "webrtc", "sdp": "v=0\r\n"}
    bad = [
        ({**START, "turn_detection": {}}, offer, "unknown_parameter", "session.turn_detection"),
        (
            {**START, "audio": {"format": {"type": "audio/pcm"}}},
            offer,
            "unknown_parameter",
            "session.audio.format",
        ),
        ({**START, "idle_timeout_s": 30}, offer, "unsupported_parameter", "session.idle_timeout_s"),
        (START, {"type": "sip", "sdp": "v=0"}, "invalid_value", "transport"),
        (START, {"type": "webrtc", "sdp": "hello"}, "invalid_offer", "sdp"),
    ]
    try:
        for session, transport, code, param in bad:
            with pytest.raises(openai.BadRequestError) as refused:
                await sdk.live.create(session=session, transport=transport)  # type: ignore[arg-type]
            error = refused.value.body
            assert isinstance(error, dict) and (error["code"], error["param"]) == (code, param), error
    finally:
        await sdk.close()


@conformance("live-sideband")
async def test_the_sideband_watches_and_steers_a_webrtc_session(plain_server: ServerThread) -> None:
    sdk = client(plain_server)
    try:
        async with (
            webrtc_session(plain_server) as (caller, session_id),
            sdk.live.sideband.connect(session_id=session_id) as connection,
        ):
            backend = Live(connection)  # every event it is sent, validated by the SDK's types
            # The backend steers: its append is taken and acknowledged to both, and the model speaks.
            steer = {"type": "session.commentary.append", "event_id": "side_1", "content": "Greet the user."}
            await connection.send(steer)
            acked = await until(lambda: backend.of("session.commentary.appended"), 30, "the ack")
            assert acked[0]["client_event_id"] == "side_1"
            await caller.wait_for(
                lambda e: e.get("client_event_id") == "side_1", 30, "the ack on the channel"
            )
            # It watches: what the browser's session says reaches the backend too.
            await until(lambda: backend.text("session.output_transcript.delta"), 90, "the greeting, watched")
            caller.send({"type": "session.input_audio.mute", "event_id": "mute_1"})
            await until(lambda: backend.of("session.input_audio.muted"), 30, "the browser's mute, watched")
            assert not backend.of("error")
        # A session with no live call has no sideband: OpenAI's error shape, then a close.
        async with sdk.live.sideband.connect(session_id="sess_0000000000000000", max_retries=0) as stray:
            refused = json.loads(await stray.recv_bytes())
            assert refused["type"] == "error" and refused["error"]["code"] == "call_not_found"
            EVENTS.validate_python(refused)
    finally:
        await sdk.close()


@conformance("live-keys")
async def test_an_ephemeral_key_opens_a_webrtc_session_but_not_its_sideband(
    plain_server: ServerThread,
) -> None:
    secret = await asyncio.to_thread(mint, plain_server.http_url, API_KEY)
    browser_key = str(secret["value"])
    assert browser_key.startswith("ek_")
    async with webrtc_session(plain_server, browser_key) as (caller, session_id):
        # The sideband is the backend's: the browser's own key does not open it.
        browser = client(plain_server, browser_key)
        try:
            with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
                async with browser.live.sideband.connect(session_id=session_id, max_retries=0) as stray:
                    await stray.recv_bytes()
            assert refused.value.response.status_code == 401
        finally:
            await browser.close()
        # The browser ends its session: session.closed on the channel.
        caller.send({"type": "session.close", "event_id": "close_1"})
        closed = await caller.event("session.closed", within=30)
        assert closed["reason"] == "close_requested"
        EVENTS.validate_python(closed)
