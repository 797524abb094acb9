"""A transcription session (GA ``session.type: "transcription"``) through the official ``openai`` SDK:
audio in, live transcription deltas while the user speaks, the completed transcript, no responses."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from openai import AsyncOpenAI

from conformance.conftest import API_KEY
from conformance.test_openai_sdk import VERSION
from livegen.server.thread import ServerThread
from models.cascade.support import RealtimeCall

SAID = "Please repeat after me, purple elephants dance slowly across the wide green field."


@pytest.mark.conformance(client=f"openai-python {VERSION} (GA)", capability="transcription-session")
async def test_a_transcription_session_streams_deltas_before_the_speech_ends(
    plain_server: ServerThread, speech: Callable[..., bytes]
) -> None:
    client = AsyncOpenAI(
        api_key=API_KEY,
        base_url=f"{plain_server.http_url}/v1",
        websocket_base_url=f"{plain_server.ws_url}/v1",
    )
    async with client.realtime.connect(model="gpt-realtime") as connection:
        recorder = RealtimeCall(connection)
        try:
            await recorder.wait_for("session.created")
            transcription = {"model": "gpt-4o-transcribe", "language": "en"}
            await connection.session.update(
                session={"type": "transcription", "audio": {"input": {"transcription": transcription}}}
            )
            updated = await recorder.wait_for("session.updated")
            recorder.say(speech(SAID))
            completed = await recorder.wait_for(
                "conversation.item.input_audio_transcription.completed", within=120
            )
            await connection.response.create()
            error = await recorder.wait_for("error")
        finally:
            await recorder.close()
    kinds = [e.type for e in recorder.events]
    # The SDK reconnects by itself when a connection drops, into a new (realtime) session.
    assert kinds.count("session.created") == 1, f"the connection dropped: {kinds}"
    assert updated.session.type == "transcription"
    first_delta = kinds.index("conversation.item.input_audio_transcription.delta")
    assert first_delta < kinds.index("input_audio_buffer.speech_stopped")  # live, while speaking
    deltas = recorder.of("conversation.item.input_audio_transcription.delta")
    assert {d.item_id for d in deltas} == {completed.item_id}
    assert "".join(d.delta for d in deltas) == completed.transcript
    assert "elephant" in completed.transcript.lower()
    assert "response.created" not in kinds, kinds
    assert error.error.code == "no_responses_in_transcription_session"


@pytest.mark.conformance(client=f"openai-python {VERSION} (GA)", capability="transcription-session")
async def test_intent_transcription_opens_a_transcription_session(
    plain_server: ServerThread, speech: Callable[..., bytes]
) -> None:
    http, ws = plain_server.http_url, plain_server.ws_url
    client = AsyncOpenAI(api_key=API_KEY, base_url=f"{http}/v1", websocket_base_url=f"{ws}/v1")
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as connection:
        recorder = RealtimeCall(connection)
        try:
            created = await recorder.wait_for("session.created")
            recorder.say(speech("What is the date today?"))
            completed = await recorder.wait_for(
                "conversation.item.input_audio_transcription.completed", within=120
            )
        finally:
            await recorder.close()
    assert created.session.type == "transcription"
    assert "date" in completed.transcript.lower()
    assert "response.created" not in [e.type for e in recorder.events]


@pytest.mark.conformance(client=f"openai-python {VERSION} (beta)", capability="transcription-session")
async def test_beta_transcription_session_update(
    plain_server: ServerThread, speech: Callable[..., bytes]
) -> None:
    http, ws = plain_server.http_url, plain_server.ws_url
    client = AsyncOpenAI(api_key=API_KEY, base_url=f"{http}/v1", websocket_base_url=f"{ws}/v1")
    async with client.beta.realtime.connect(model="gpt-realtime") as connection:
        recorder = RealtimeCall(connection)
        try:
            await recorder.wait_for("session.created")
            await connection.transcription_session.update(
                session={"input_audio_transcription": {"model": "gpt-4o-transcribe"}}
            )
            await recorder.wait_for("transcription_session.updated")
            recorder.say(speech(SAID))
            completed = await recorder.wait_for(
                "conversation.item.input_audio_transcription.completed", within=120
            )
        finally:
            await recorder.close()
    kinds = [e.type for e in recorder.events]
    first_delta = kinds.index("conversation.item.input_audio_transcription.delta")
    assert first_delta < kinds.index("input_audio_buffer.speech_stopped")
    assert "elephant" in completed.transcript.lower()
    assert "response.created" not in kinds, kinds
    assert not recorder.of("error")
