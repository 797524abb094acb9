"""WebRTC calls and ephemeral keys against a real server, with an aiortc caller (``webrtc_client.py``).

The server runs the scripted test model (``tests/voice/scripted.py``), so these
tests check the transport: keys, SDP, media both ways, the data channel, the
track's playback events, cancel, hangup, a vanished peer, and refusals.
The spoken end-to-end call with the embedded cascade is ``test_webrtc_speech.py``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from livegen.client.webrtc import Caller, loudness, mint
from livegen.server.thread import ServerThread
from voice.scripted import registry

MANUAL = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}


@pytest.fixture
def voice_server(start_server: Callable[..., ServerThread]) -> ServerThread:
    server = start_server(registry=registry(), voice_model="scripted-voice", world_model="none")
    server.wait_ready(timeout=30)
    return server


def voice_service(server: ServerThread) -> Any:
    return next(s for s in server.app.state.livegen.services if s.name == "voice")


def tone_pcm(ms: int) -> bytes:
    from voice.scripted import tone

    return tone(ms, 24_000, 300.0)


async def test_a_key_is_minted_in_openais_shape_and_bound_to_its_session(voice_server: ServerThread) -> None:
    minted = mint(voice_server.http_url, session={"type": "realtime", "instructions": "be brief"})
    assert minted["value"].startswith("ek_")
    assert minted["expires_at"] > time.time() + 500  # the default: ten minutes
    assert minted["session"]["instructions"] == "be brief"
    # The key is accepted on the WebSocket and the session gets the key's configuration.
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key=minted["value"], websocket_base_url=f"{voice_server.ws_url}/v1")
    async with client.realtime.connect(model="scripted-voice") as connection:
        types = []
        while "session.updated" not in types:
            event = await asyncio.wait_for(connection.recv(), 10)
            types.append(event.type)
        assert event.session.instructions == "be brief"


def test_client_secrets_need_the_server_key_and_refuse_bad_requests(
    start_server: Callable[..., ServerThread],
) -> None:
    server = start_server(
        registry=registry(), voice_model="scripted-voice", world_model="none", api_key="sk-x"
    )
    server.wait_ready(timeout=30, verify=True)
    url = f"{server.http_url}/v1/realtime/client_secrets"
    assert httpx.post(url, json={}).status_code == 401
    minted = mint(server.http_url, api_key="sk-x")
    # An ephemeral key opens sessions only: it cannot mint more keys.
    refused = httpx.post(url, json={}, headers={"Authorization": f"Bearer {minted['value']}"})
    assert refused.status_code == 401
    bad = httpx.post(url, json={"expires_after": {"seconds": 5}}, headers={"Authorization": "Bearer sk-x"})
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "expires_after.seconds"
    bad = httpx.post(url, json={"session": {"type": "nope"}}, headers={"Authorization": "Bearer sk-x"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "session.type"
    beta = httpx.post(
        f"{server.http_url}/v1/realtime/sessions",
        json={"voice": "verse"},
        headers={"Authorization": "Bearer sk-x"},
    )
    assert beta.status_code == 200 and beta.json()["client_secret"]["value"].startswith("ek_")


async def test_a_browser_opens_the_websocket_with_an_ephemeral_key_subprotocol(
    start_server: Callable[..., ServerThread],
) -> None:
    import json

    import websockets

    server = start_server(
        registry=registry(), voice_model="scripted-voice", world_model="none", api_key="sk-x"
    )
    server.wait_ready(timeout=30)
    key = mint(server.http_url, api_key="sk-x")["value"]
    url = f"{server.ws_url}/v1/realtime"
    async with websockets.connect(url, subprotocols=["realtime", f"openai-insecure-api-key.{key}"]) as socket:
        assert json.loads(await asyncio.wait_for(socket.recv(), 10))["type"] == "session.created"
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(url, subprotocols=["realtime", "openai-insecure-api-key.ek_unknown"])
    assert refused.value.response.status_code == 401


async def test_a_call_talks_over_the_track_and_the_data_channel(
    voice_server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    key = mint(voice_server.http_url, session=MANUAL)["value"]
    caller = Caller(voice_server.http_url, key)
    try:
        await caller.connect()
        await caller.event("session.created")
        await caller.event("session.updated")  # the key's configuration: manual turns
        speaking = time.monotonic()
        caller.microphone.say(tone_pcm(1000))
        await caller.microphone.drained.wait()
        await asyncio.sleep(0.3)  # the jitter buffer and the last append
        caller.send({"type": "input_audio_buffer.commit"})
        spoken_ms = (time.monotonic() - speaking) * 1000
        transcript = await caller.event("conversation.item.input_audio_transcription.completed")
        heard_ms = int(transcript["transcript"].split()[0])
        # The second of speech reached the model through Opus, and the track (which goes on with silence
        # in real time) carried no more than the time that passed: nothing twice. A busy machine
        # stretches that time, so the bound is the time measured, not a constant.
        assert 900 <= heard_ms <= spoken_ms + 200, (heard_ms, spoken_ms)
        asked = time.monotonic()
        caller.send({"type": "response.create"})
        started = await caller.event("output_audio_buffer.started")
        done = await caller.event("response.done")
        stopped = await caller.event("output_audio_buffer.stopped")
        assert started["response_id"] == done["response"]["id"] == stopped["response_id"]
        # The answer's audio came on the track, and not as events on the channel.
        assert not [e for e in caller.events if e["type"] == "response.output_audio.delta"]
        assert loudness(caller.audio_since(asked)) > 1000
        hung = await caller.hangup()
        assert hung.status_code == 200
        await caller.event("session.closed", within=10)
        await until_no_calls(voice_server)
        assert "webrtc.call_opened" in caplog.text and key not in caplog.text  # keys are never logged
    finally:
        await caller.close()


async def test_a_multipart_offer_configures_its_session_and_the_track_keeps_its_format(
    voice_server: ServerThread,
) -> None:
    # The key asks for G.711; a call's track decodes and encodes PCM16 at 24 kHz whatever it says.
    mulaw = {"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcmu"}}}}
    caller = Caller(voice_server.http_url, mint(voice_server.http_url, session=mulaw)["value"])
    try:
        await caller.connect(session={"type": "realtime", "instructions": "from the form"})
        updated = await caller.event("session.updated")
        assert updated["session"]["instructions"] == "from the form"
        assert updated["session"]["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    finally:
        await caller.close()


async def test_a_call_refuses_a_session_update_that_changes_its_audio_format(
    voice_server: ServerThread,
) -> None:
    # The track is Opus, decoded to and encoded from PCM16 at 24 kHz: a session that took G.711 or
    # another rate would misread the caller's audio and garble its answers. Such an update is
    # refused whole (nothing else in it applies), and the call goes on.
    caller = Caller(voice_server.http_url, None)
    refused = {
        "ev_in": ({"audio": {"input": {"format": {"type": "audio/pcmu"}}}}, "session.audio.input.format"),
        "ev_out": (
            {"instructions": "never", "audio": {"output": {"format": {"type": "audio/pcm", "rate": 16000}}}},
            "session.audio.output.format",
        ),
        "ev_rate": ({"audio": {"input": {"sample_rate_hz": 16000}}}, "session.audio.input.sample_rate_hz"),
    }
    try:
        await caller.connect()
        await caller.event("session.created")
        for event_id, (session, _) in refused.items():
            caller.send(
                {"type": "session.update", "event_id": event_id, "session": {"type": "realtime", **session}}
            )
        same = {"type": "audio/pcm", "rate": 24000}  # what the call already is: accepted
        kept = {"type": "realtime", "instructions": "kept", "audio": {"input": {"format": same}}}
        caller.send({"type": "session.update", "session": kept})
        updated = await caller.event("session.updated", within=20)
        errors = {e["error"]["event_id"]: e["error"] for e in caller.events if e["type"] == "error"}
        for event_id, (_, param) in refused.items():
            error = errors[event_id]
            assert error["code"] == "invalid_value" and error["param"] == param, error
            assert error["type"] == "invalid_request_error" and f"'{param}'" in error["message"], error
        assert [e["session"]["instructions"] for e in caller.events if e["type"] == "session.updated"] == [
            "kept"
        ]
        audio = updated["session"]["audio"]
        assert audio["input"]["format"] == audio["output"]["format"] == same
    finally:
        await caller.close()


async def test_the_official_sdk_mints_a_key_calls_and_hangs_up(voice_server: ServerThread) -> None:
    from aiortc import RTCSessionDescription
    from openai import AsyncOpenAI

    server_client = AsyncOpenAI(api_key="unused", base_url=f"{voice_server.http_url}/v1")
    secret = await server_client.realtime.client_secrets.create(
        expires_after={"anchor": "created_at", "seconds": 60},
        session={"type": "realtime", "instructions": "from the sdk"},
    )
    assert secret.value.startswith("ek_") and secret.session.type == "realtime"
    browser_client = AsyncOpenAI(api_key=secret.value, base_url=f"{voice_server.http_url}/v1")
    caller = Caller(voice_server.http_url, secret.value)
    try:
        caller.pc.addTrack(caller.microphone)
        await caller.pc.setLocalDescription(await caller.pc.createOffer())
        raw = await browser_client.realtime.calls.with_raw_response.create(
            sdp=caller.pc.localDescription.sdp, session={"type": "realtime", "output_modalities": ["audio"]}
        )
        assert raw.http_response.status_code == 201
        call_id = raw.headers["location"].rsplit("/", 1)[-1]
        answer = raw.http_response.text
        await caller.pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        updated = await caller.event("session.updated")
        assert updated["session"]["instructions"] == "from the sdk"  # the key's configuration
        await browser_client.realtime.calls.hangup(call_id)
        await caller.event("session.closed", within=10)
    finally:
        await caller.close()
        await browser_client.close()
        await server_client.close()


async def test_cancel_stops_the_tracks_audio_at_once(voice_server: ServerThread) -> None:
    model = voice_service(voice_server).engine.models["scripted-voice"]
    model.script.reply_ms = 8000  # a long answer, generated at once: it is all queued to play
    caller = Caller(voice_server.http_url, mint(voice_server.http_url, session=MANUAL)["value"])
    try:
        await caller.connect()
        await caller.event("session.updated")
        caller.send({"type": "response.create"})
        await caller.event("output_audio_buffer.started")
        await asyncio.sleep(1.0)
        caller.send({"type": "response.cancel"})
        cleared = await caller.event("output_audio_buffer.cleared", within=10)
        done = await caller.event("response.done")
        assert done["response"]["status"] == "cancelled" and cleared["response_id"] == done["response"]["id"]
        truncated = await caller.event("conversation.item.truncated")
        # The history keeps what went out on the track: about the second it played, not 8 s.
        assert 500 <= truncated["audio_end_ms"] <= 3000
        await asyncio.sleep(1.0)  # what was in flight has arrived
        assert loudness(caller.audio_since(time.monotonic() - 0.5)) < 50
    finally:
        await caller.close()


async def test_a_vanished_peer_ends_its_call(start_server: Callable[..., ServerThread]) -> None:
    server = start_server(
        registry=registry(), voice_model="scripted-voice", world_model="none", resume_grace_s=1.0
    )
    server.wait_ready(timeout=30)
    caller = Caller(server.http_url, None)
    await caller.connect()
    await caller.event("session.created")
    assert len(voice_service(server).calls.calls) == 1
    await caller.pc.close()  # no goodbye: the media stops
    # The call is freed at once; its session parks for the grace period (a resume may come), then ends.
    await until_no_calls(server, within=30)


async def test_bad_offers_and_keys_are_refused_in_openais_shape(voice_server: ServerThread) -> None:
    url = f"{voice_server.http_url}/v1/realtime/calls"
    sdp = {"Content-Type": "application/sdp"}
    async with httpx.AsyncClient(timeout=10) as http:
        garbage = await http.post(url, content="hello", headers=sdp)
        assert garbage.status_code == 400 and garbage.json()["error"]["code"] == "invalid_offer"
        no_audio = (
            "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"
            "m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\n"
        )
        refused = await http.post(url, content=no_audio, headers=sdp)
        assert refused.status_code == 400 and "no audio" in refused.json()["error"]["message"]
        broken = "v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\nbogus\r\n"
        refused = await http.post(url, content=broken, headers=sdp)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_offer"
        unknown = await http.post(url, content=no_audio, headers={**sdp, "Authorization": "Bearer ek_nope"})
        assert unknown.status_code == 401 and unknown.json()["error"]["code"] == "invalid_api_key"
        hangup = await http.post(f"{url}/rtc_nope/hangup")
        assert hangup.status_code == 404 and hangup.json()["error"]["code"] == "call_not_found"
    assert not voice_service(voice_server).calls.calls


def test_pages_on_other_origins_may_call(start_server: Callable[..., ServerThread]) -> None:
    server = start_server(
        registry=registry(), voice_model="scripted-voice", world_model="none", api_key="sk-x"
    )
    server.wait_ready(timeout=30)
    page = {"Origin": "https://app.example"}
    url = f"{server.http_url}/v1/realtime/calls"
    preflight = httpx.options(url, headers={**page, "Access-Control-Request-Method": "POST"})
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "https://app.example"
    assert "authorization" in preflight.headers["access-control-allow-headers"]
    key = mint(server.http_url, api_key="sk-x")["value"]
    refused = httpx.post(url, content="nope", headers={**page, "Authorization": f"Bearer {key}"})
    assert refused.status_code == 400  # the page can read why
    assert refused.headers["access-control-allow-origin"] == "https://app.example"
    assert httpx.post(url, content="nope", headers=page).status_code == 401  # the call itself needs a key


async def test_an_expired_key_is_refused(voice_server: ServerThread) -> None:
    secrets = voice_server.app.state.livegen.client_secrets
    key = mint(voice_server.http_url, expires_after={"seconds": 10})["value"]
    secrets._clock = lambda: time.time() + 11  # as if the key's ten seconds had passed
    caller = Caller(voice_server.http_url, key)
    try:
        response = await caller.offer()
        assert response.status_code == 401 and "expired" in response.json()["error"]["message"]
    finally:
        await caller.close()


async def test_too_many_calls_are_refused(start_server: Callable[..., ServerThread]) -> None:
    server = start_server(
        registry=registry(), voice_model="scripted-voice", world_model="none", webrtc_max_calls=1
    )
    server.wait_ready(timeout=30)
    first, second = Caller(server.http_url, None), Caller(server.http_url, None)
    try:
        await first.connect()
        refused = await second.offer()
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "too_many_sessions"
        await first.event("session.created")  # the first call goes on
    finally:
        await first.close()
        await second.close()


async def test_a_websocket_attaches_to_a_live_call(voice_server: ServerThread) -> None:
    from openai import AsyncOpenAI

    caller = Caller(voice_server.http_url, None)
    try:
        await caller.connect()
        await caller.event("session.created")
        client = AsyncOpenAI(api_key="unused", websocket_base_url=f"{voice_server.ws_url}/v1")
        async with client.realtime.connect(
            model="scripted-voice", extra_query={"call_id": caller.call_id}
        ) as ws:
            await ws.session.update(session={"type": "realtime", "instructions": "from the backend"})
            seen = await asyncio.wait_for(ws.recv(), 10)
            assert seen.type == "session.updated" and seen.session.instructions == "from the backend"
        updated = await caller.event("session.updated")  # the browser's side saw it too
        assert updated["session"]["instructions"] == "from the backend"
    finally:
        await caller.close()


async def until_no_calls(server: ServerThread, within: float = 15.0) -> None:
    service = voice_service(server)
    deadline = time.monotonic() + within
    while service.calls.calls or service.engine.runners:
        assert time.monotonic() < deadline, "the call was not freed"
        await asyncio.sleep(0.1)
