"""Whole voice sessions driven by the official OpenAI SDK against a real server.

The server runs the scripted test model (``tests/voice/scripted.py``) through
a registry built here; the client is ``AsyncOpenAI().realtime.connect`` with
``websocket_base_url`` pointed at the server, exactly as a user would write it.
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
from voice.scripted import ScriptedVoice, registry


def pcm24(ms: int, loud: bool = False) -> str:
    t = np.arange(24 * ms) / 24_000
    wave = (np.sin(2 * np.pi * 300 * t) * (9000 if loud else 0)).astype("<i2")
    return base64.b64encode(wave.tobytes()).decode()


@pytest.fixture
def voice_server(start_server: Callable[..., ServerThread]) -> ServerThread:
    server = start_server(registry=registry(), voice_model="scripted-voice", world_model="none")
    server.wait_ready(timeout=30)
    return server


def model_of(server: ServerThread) -> ScriptedVoice:
    service = next(s for s in server.app.state.livegen.services if s.name == "voice")
    model: ScriptedVoice = service.engine.models["scripted-voice"]
    return model


def client(server: ServerThread, api_key: str = "unused") -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key=api_key, base_url=f"{server.http_url}/v1", websocket_base_url=f"{server.ws_url}/v1"
    )


async def until(connection: Any, last: str, limit: int = 500) -> list[Any]:
    events = []
    for _ in range(limit):
        event = await asyncio.wait_for(connection.recv(), 20)
        events.append(event)
        if event.type == last:
            return events
    raise AssertionError(f"no {last} in {[e.type for e in events]}")


async def manual_turns(connection: Any) -> None:
    await connection.session.update(
        session={"type": "realtime", "audio": {"input": {"turn_detection": None}}}
    )
    await until(connection, "session.updated")


async def test_a_whole_turn_with_audio_reply(voice_server: ServerThread) -> None:
    async with client(voice_server).realtime.connect(model="scripted-voice") as connection:
        created = await connection.recv()
        assert created.type == "session.created" and created.session.model == "scripted-voice"
        await manual_turns(connection)
        for _ in range(10):
            await connection.input_audio_buffer.append(audio=pcm24(100))
        await connection.input_audio_buffer.commit()
        events = await until(connection, "conversation.item.input_audio_transcription.completed")
        committed = next(e for e in events if e.type == "input_audio_buffer.committed")
        assert events[-1].item_id == committed.item_id
        heard_ms = int(events[-1].transcript.split()[0])
        assert heard_ms == 1000  # 1 s of 24 kHz audio reached the 16 kHz model, all of it
        stream = model_of(voice_server).streams[-1]
        assert stream.calls[:12] == ["append"] * 11 + ["commit"]  # 10 appends and the resampler's tail

        await connection.response.create()
        events = await until(connection, "response.done")
        kinds = [e.type for e in events]
        assert kinds[0] == "response.created"
        assert kinds.index("response.output_item.added") < kinds.index("response.output_audio.delta")
        done = events[-1].response
        assert done.status == "completed" and done.id == events[0].response.id
        audio = b"".join(base64.b64decode(e.delta) for e in events if e.type == "response.output_audio.delta")
        assert len(audio) == 2 * 24 * 600  # the whole 600 ms tone, at the wire's 24 kHz
        transcript = "".join(e.delta for e in events if e.type == "response.output_audio_transcript.delta")
        assert transcript == "hello from livegen"
        item_id = done.output[0].id

        await connection.conversation.item.truncate(item_id=item_id, content_index=0, audio_end_ms=300)
        truncated = await until(connection, "conversation.item.truncated")
        assert truncated[-1].audio_end_ms == 300
        await connection.conversation.item.retrieve(item_id=item_id)
        retrieved = (await until(connection, "conversation.item.retrieved"))[-1]
        assert retrieved.item.status == "incomplete"
        # Half the audio was heard, so history keeps about half the words.
        assert retrieved.item.content[0].transcript == "hello fro"


async def test_cancel_ends_the_response_once_and_stops_its_audio(voice_server: ServerThread) -> None:
    model_of(voice_server).script.reply_ms = 20_000
    model_of(voice_server).script.delay_s = 0.005
    async with client(voice_server).realtime.connect(model="scripted-voice") as connection:
        await until(connection, "session.created")
        await manual_turns(connection)
        await connection.response.create()
        await until(connection, "response.output_audio.delta")
        await connection.response.cancel(event_id="evt_cancel_1")
        events = await until(connection, "response.done")
        assert events[-1].response.status == "cancelled"
        assert events[-1].response.status_details.reason == "client_cancelled"
        # Nothing of that response follows its terminal; the session goes on.
        await connection.response.cancel(event_id="evt_cancel_2")
        error = (await until(connection, "error"))[-1]
        assert error.error.code == "response_cancel_not_active" and error.error.event_id == "evt_cancel_2"
        assert not [e for e in events[:-1] if e.type == "response.done"]
    stream = model_of(voice_server).streams[-1]
    assert "cancel" in stream.calls


async def test_server_vad_barge_in_cancels_and_truncates(voice_server: ServerThread) -> None:
    model_of(voice_server).script.reply_ms = 20_000
    model_of(voice_server).script.delay_s = 0.005
    async with client(voice_server).realtime.connect(model="scripted-voice") as connection:
        await until(connection, "session.created")
        for _ in range(5):
            await connection.input_audio_buffer.append(audio=pcm24(100, loud=True))
        for _ in range(8):
            await connection.input_audio_buffer.append(audio=pcm24(100))
        events = await until(connection, "response.output_audio.delta")
        kinds = [e.type for e in events]
        assert kinds.index("input_audio_buffer.speech_started") < kinds.index(
            "input_audio_buffer.speech_stopped"
        )
        assert "response.created" in kinds
        for _ in range(3):
            await connection.input_audio_buffer.append(audio=pcm24(100, loud=True))
        events = await until(connection, "response.done")
        kinds = [e.type for e in events]
        assert "input_audio_buffer.speech_started" in kinds
        assert events[-1].response.status == "cancelled"
        assert events[-1].response.status_details.reason == "turn_detected"
        truncated = [e for e in events if e.type == "conversation.item.truncated"]
        assert truncated and truncated[0].audio_end_ms < 20_000


async def test_semantic_vad_is_accepted_and_ends_a_turn_by_its_eagerness(voice_server: ServerThread) -> None:
    async with client(voice_server).realtime.connect(model="scripted-voice") as connection:
        await until(connection, "session.created")
        detection = {"type": "semantic_vad", "eagerness": "high"}
        await connection.session.update(
            session={"type": "realtime", "audio": {"input": {"turn_detection": detection}}}
        )
        updated = (await until(connection, "session.updated"))[-1]
        echoed = updated.session.audio.input.turn_detection
        assert (echoed.type, echoed.eagerness) == ("semantic_vad", "high")
        for _ in range(5):
            await connection.input_audio_buffer.append(audio=pcm24(100, loud=True))
        for _ in range(5):  # 500 ms of silence: past "high" (350 ms)
            await connection.input_audio_buffer.append(audio=pcm24(100))
        kinds = [e.type for e in await until(connection, "response.created")]
        assert kinds.index("input_audio_buffer.speech_stopped") < kinds.index("input_audio_buffer.committed")


async def test_idle_timeout_answers_when_nobody_speaks_after_the_answer(voice_server: ServerThread) -> None:
    model_of(voice_server).script.reply_ms = 200
    async with client(voice_server).realtime.connect(model="scripted-voice") as connection:
        await until(connection, "session.created")
        detection = {"type": "server_vad", "idle_timeout_ms": 300}
        await connection.session.update(
            session={"type": "realtime", "audio": {"input": {"turn_detection": detection}}}
        )
        await until(connection, "session.updated")
        await connection.response.create()
        first = (await until(connection, "response.done"))[-1].response.id
        events = await until(connection, "response.created")  # nobody spoke: the server asks again
        assert "input_audio_buffer.timeout_triggered" in [e.type for e in events]
        assert events[-1].response.id != first


async def test_bad_input_gets_openai_errors_and_the_session_goes_on(voice_server: ServerThread) -> None:
    service = next(s for s in voice_server.app.state.livegen.services if s.name == "voice")
    from livegen.voice.session import Limits

    service.engine.limits = Limits(max_input_bytes=16_000)
    async with client(voice_server).realtime.connect(model="scripted-voice") as connection:
        await until(connection, "session.created")
        await manual_turns(connection)

        async def expect(code: str, event: dict[str, Any]) -> None:
            await connection.send(event)
            error = (await until(connection, "error"))[-1].error
            assert (error.code, error.event_id) == (code, event.get("event_id")), error

        await expect(
            "input_audio_buffer_commit_empty", {"type": "input_audio_buffer.commit", "event_id": "e1"}
        )
        await expect(
            "invalid_base64", {"type": "input_audio_buffer.append", "audio": "***", "event_id": "e2"}
        )
        fmt = {
            "type": "session.update",
            "event_id": "e3",
            "session": {"type": "realtime", "audio": {"input": {"format": {"type": "audio/opus"}}}},
        }
        await expect("invalid_audio_format", fmt)
        await expect(
            "item_retrieve_invalid_item_id",
            {"type": "conversation.item.retrieve", "item_id": "nope", "event_id": "e4"},
        )
        await expect(
            "item_delete_invalid_item_id",
            {"type": "conversation.item.delete", "item_id": "nope", "event_id": "e5"},
        )
        await expect("response_cancel_not_active", {"type": "response.cancel", "event_id": "e6"})
        # The budget is 0.5 s of 16 kHz audio: a 1 s append is refused, and nothing accepted is lost.
        await connection.input_audio_buffer.append(audio=pcm24(200))
        await expect(
            "input_audio_backpressure",
            {"type": "input_audio_buffer.append", "audio": pcm24(1000), "event_id": "e7"},
        )
        await connection.input_audio_buffer.commit()
        transcript = (await until(connection, "conversation.item.input_audio_transcription.completed"))[-1]
        assert 150 <= int(transcript.transcript.split()[0]) <= 200

        await connection.response.create()
        await until(connection, "response.created")
        await expect(
            "conversation_already_has_active_response", {"type": "response.create", "event_id": "e8"}
        )
        done = (await until(connection, "response.done"))[-1].response
        item_id = done.output[0].id
        beyond = {
            "type": "conversation.item.truncate",
            "item_id": item_id,
            "content_index": 0,
            "audio_end_ms": 60_000,
            "event_id": "e9",
        }
        await expect("invalid_value", beyond)
        await connection.response.create()
        assert (await until(connection, "response.done"))[-1].response.status == "completed"


async def test_raw_socket_errors_malformed_json_and_unknown_types(voice_server: ServerThread) -> None:
    import json

    import websockets

    async with websockets.connect(f"{voice_server.ws_url}/v1/realtime?model=scripted-voice") as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"
        await ws.send("{not json")
        assert json.loads(await ws.recv())["error"]["code"] == "invalid_json"
        await ws.send(json.dumps({"type": "response.dance", "event_id": "evt_9"}))
        error = json.loads(await ws.recv())["error"]
        assert (error["code"], error["event_id"], error["param"]) == ("invalid_value", "evt_9", "type")
        assert error["message"].startswith("Invalid value: 'response.dance'. Supported values are: ")
        await ws.send(json.dumps({"type": "conversation.item.truncate", "item_id": 3, "event_id": "evt_10"}))
        error = json.loads(await ws.recv())["error"]
        assert error["code"] == "invalid_type" and error["event_id"] == "evt_10"
        await ws.send(json.dumps({"type": "session.close"}))
        closed = json.loads(await ws.recv())
        assert closed["type"] == "session.closed"
        with pytest.raises(websockets.ConnectionClosed):
            await ws.recv()
    metrics = voice_server.app.state.livegen.metrics.render().decode()
    assert 'livegen_errors_total{code="invalid_json",kind="voice"} 1.0' in metrics


async def test_api_key_by_header_or_subprotocol(start_server: Callable[..., ServerThread]) -> None:
    import websockets

    server = start_server(
        registry=registry(), voice_model="scripted-voice", world_model="none", api_key="sekret"
    )
    server.wait_ready(timeout=30)
    async with client(server, api_key="sekret").realtime.connect(model="scripted-voice") as connection:
        assert (await connection.recv()).type == "session.created"
    protocols = ["realtime", "openai-insecure-api-key.sekret"]
    async with websockets.connect(f"{server.ws_url}/v1/realtime", subprotocols=protocols) as ws:  # type: ignore[arg-type]
        assert ws.subprotocol == "realtime"
        assert "session.created" in await ws.recv()
    with pytest.raises(websockets.InvalidStatus):
        async with websockets.connect(f"{server.ws_url}/v1/realtime"):
            pass


async def test_unknown_model_is_refused_with_an_error_event(voice_server: ServerThread) -> None:
    async with client(voice_server).realtime.connect(model="no-such-model") as connection:
        event = await connection.recv()
        assert event.type == "error" and event.error.code == "model_not_found"


def test_without_a_voice_model_realtime_is_not_served(start_server: Callable[..., ServerThread]) -> None:
    import httpx

    from livegen.models import Registry

    server = start_server(registry=Registry([]), voice_model="auto", world_model="none")
    assert httpx.get(f"{server.http_url}/health").status_code == 200
    response = httpx.get(f"{server.http_url}/v1/realtime")
    assert response.status_code == 404


async def test_g711_in_and_out(voice_server: ServerThread) -> None:
    from livegen.protocol.audio import Encoding, g711_encode

    t = np.arange(8000) / 8000
    tone = (np.sin(2 * np.pi * 440 * t) * 9000).astype("<i2").tobytes()
    mulaw = g711_encode(tone, Encoding.PCMU)
    async with client(voice_server).realtime.connect(model="scripted-voice") as connection:
        await until(connection, "session.created")
        audio = {"input": {"format": {"type": "audio/pcmu"}, "turn_detection": None}}
        audio["output"] = {"format": {"type": "audio/pcma"}}
        await connection.session.update(session={"type": "realtime", "audio": audio})
        updated = (await until(connection, "session.updated"))[-1]
        assert updated.session.audio.output.format.type == "audio/pcma"
        for i in range(0, len(mulaw), 160):  # 20 ms of 8 kHz mu-law per append
            await connection.input_audio_buffer.append(audio=base64.b64encode(mulaw[i : i + 160]).decode())
        await connection.input_audio_buffer.commit()
        transcript = (await until(connection, "conversation.item.input_audio_transcription.completed"))[-1]
        assert transcript.transcript == "1000 ms"
        await connection.response.create()
        events = await until(connection, "response.done")
        alaw = b"".join(base64.b64decode(e.delta) for e in events if e.type == "response.output_audio.delta")
        assert abs(len(alaw) - 8 * 600) <= 2  # 600 ms at 8 kHz, one byte a sample, tail included


async def test_session_update_switches_the_model_until_it_has_heard_anything(
    voice_server: ServerThread,
) -> None:
    async with client(voice_server).realtime.connect(model="scripted-voice") as connection:
        await until(connection, "session.created")
        await connection.send({"type": "session.update", "event_id": "e1", "session": {"model": "nope"}})
        error = (await until(connection, "error"))[-1].error
        assert (error.code, error.event_id) == ("model_not_found", "e1")
        session = {"type": "realtime", "model": "scripted-8k", "audio": {"input": {"turn_detection": None}}}
        await connection.session.update(session=session)
        updated = (await until(connection, "session.updated"))[-1]
        assert updated.session.model == "scripted-8k"
        await connection.input_audio_buffer.append(audio=pcm24(500))
        await connection.input_audio_buffer.commit()
        transcript = (await until(connection, "conversation.item.input_audio_transcription.completed"))[-1]
        assert transcript.transcript == "500 ms"  # heard by the 8 kHz model, resampled for it
        service = next(s for s in voice_server.app.state.livegen.services if s.name == "voice")
        assert service.engine.models["scripted-8k"].streams[-1].calls[-1] == "commit"
        await connection.send(
            {"type": "session.update", "event_id": "e2", "session": {"model": "scripted-voice"}}
        )
        error = (await until(connection, "error"))[-1].error
        assert (error.code, error.event_id) == ("model_change_unsupported", "e2")


async def test_an_alias_is_the_model_it_names(voice_server: ServerThread) -> None:
    async with client(voice_server).realtime.connect(model="alias") as connection:
        created = await connection.recv()
        assert created.session.model == "scripted-voice"
        await connection.input_audio_buffer.append(audio=pcm24(100))
        await connection.session.update(session={"type": "realtime", "model": "alias", "instructions": "hi"})
        updated = (await until(connection, "session.updated"))[-1]  # the same model: no switch, no refusal
        assert updated.session.model == "scripted-voice" and updated.session.instructions == "hi"
