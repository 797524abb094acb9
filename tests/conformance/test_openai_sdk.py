"""The Python ``openai`` SDK (pinned in pyproject.toml), GA and beta, against ``livegen serve``.

Each test is one capability of docs/compatibility.md, driven the way the SDK's
users drive it: ``client.realtime.connect`` (GA) or ``client.beta.realtime.connect``
(beta, which sends ``OpenAI-Beta: realtime=v1``), default session settings
(server VAD on), a microphone that streams 20 ms every 20 ms. What a user of
the SDK sees is its typed events; an ``error`` event is what it shows them.
"""

from __future__ import annotations

import base64
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from openai import AsyncOpenAI

from conformance.conftest import API_KEY
from conformance.support import INTERRUPTION, LONG_QUESTION, QUESTION, TEXT_QUESTION
from livegen.server.thread import ServerThread
from models.cascade.support import RealtimeCall

VERSION = "3.57.0"


@dataclass(frozen=True)
class Dialect:
    client: str
    beta: bool
    audio_delta: str
    transcript_delta: str


GA = Dialect(
    f"openai-python {VERSION} (GA)",
    False,
    "response.output_audio.delta",
    "response.output_audio_transcript.delta",
)
BETA = Dialect(
    f"openai-python {VERSION} (beta)", True, "response.audio.delta", "response.audio_transcript.delta"
)


def dialects(capability: str) -> list[Any]:
    """Both dialects, each marked as its own cell of the matrix."""
    return [
        pytest.param(
            d,
            id="beta" if d.beta else "ga",
            marks=pytest.mark.conformance(client=d.client, capability=capability),
        )
        for d in (GA, BETA)
    ]


@asynccontextmanager
async def call(server: ServerThread, dialect: Dialect) -> AsyncIterator[RealtimeCall]:
    client = AsyncOpenAI(
        api_key=API_KEY, base_url=f"{server.http_url}/v1", websocket_base_url=f"{server.ws_url}/v1"
    )
    realtime = client.beta.realtime if dialect.beta else client.realtime
    async with realtime.connect(model="gpt-realtime") as connection:
        recorder = RealtimeCall(connection)
        try:
            await recorder.wait_for("session.created")
            yield recorder
        finally:
            await recorder.close()


def errors(recorder: RealtimeCall) -> list[Any]:
    return [e.error for e in recorder.of("error")]


def said(recorder: RealtimeCall, dialect: Dialect, response_id: str) -> str:
    return "".join(e.delta for e in recorder.of(dialect.transcript_delta) if e.response_id == response_id)


def audio_bytes(recorder: RealtimeCall, dialect: Dialect, response_id: str) -> int:
    return sum(
        len(base64.b64decode(e.delta))
        for e in recorder.of(dialect.audio_delta)
        if e.response_id == response_id
    )


@pytest.mark.parametrize("dialect", dialects("spoken-turn"))
async def test_spoken_turn(
    plain_server: ServerThread, speech: Callable[..., bytes], dialect: Dialect
) -> None:
    async with call(plain_server, dialect) as recorder:
        recorder.say(speech(QUESTION))
        done = await recorder.wait_for("response.done", within=120)
    assert done.response.status == "completed"
    kinds = [e.type for e in recorder.events]
    assert kinds.index("input_audio_buffer.speech_started") < kinds.index("input_audio_buffer.speech_stopped")
    [transcript] = recorder.of("conversation.item.input_audio_transcription.completed")
    assert "12" in transcript.transcript and "7" in transcript.transcript
    assert "84" in said(recorder, dialect, done.response.id)
    assert audio_bytes(recorder, dialect, done.response.id) > 48_000  # over a second of speech
    assert errors(recorder) == []


@pytest.mark.parametrize("dialect", dialects("barge-in"))
async def test_barge_in(plain_server: ServerThread, speech: Callable[..., bytes], dialect: Dialect) -> None:
    async with call(plain_server, dialect) as recorder:
        recorder.say(speech(LONG_QUESTION))
        first = await recorder.wait_for("response.created", within=120)
        await recorder.wait_for(dialect.audio_delta, within=120, response_id=first.response.id)
        mark = len(recorder.events)
        recorder.say(speech(INTERRUPTION, lead_s=0.0))
        cancelled = await recorder.wait_for("response.done", within=120, response__id=first.response.id)
        second = await recorder.wait_for(
            "response.done", within=120, after=mark, response__status="completed"
        )
    assert cancelled.response.status == "cancelled"
    assert cancelled.response.status_details.reason == "turn_detected"
    truncated = [e for e in recorder.events[mark:] if e.type == "conversation.item.truncated"]
    assert truncated and truncated[0].item_id == cancelled.response.output[0].id
    assert re.search(r"\d:\d\d", said(recorder, dialect, second.response.id))  # it tells the time
    assert errors(recorder) == []


@pytest.mark.parametrize("dialect", dialects("text-turn"))
async def test_text_turn(plain_server: ServerThread, dialect: Dialect) -> None:
    async with call(plain_server, dialect) as recorder:
        text = {"type": "input_text", "text": TEXT_QUESTION}
        await recorder.connection.conversation.item.create(
            item={"type": "message", "role": "user", "content": [text]}
        )
        await recorder.connection.response.create()
        done = await recorder.wait_for("response.done", within=120)
    assert done.response.status == "completed"
    assert "4" in said(recorder, dialect, done.response.id)
    assert audio_bytes(recorder, dialect, done.response.id) > 0
    assert errors(recorder) == []


@pytest.mark.parametrize("dialect", dialects("unknown-item"))
async def test_unknown_item(plain_server: ServerThread, dialect: Dialect) -> None:
    async with call(plain_server, dialect) as recorder:
        connection = recorder.connection
        await connection.conversation.item.retrieve(item_id="item_nope", event_id="evt_retrieve")
        await connection.conversation.item.delete(item_id="item_nope", event_id="evt_delete")
        await recorder.wait_for("error", error__event_id="evt_delete")
        await connection.session.update(
            session={"instructions": "be brief"}
            if dialect.beta
            else {"type": "realtime", "instructions": "be brief"}
        )
        await recorder.wait_for("session.updated")  # the session goes on
    found = {e.event_id: e.code for e in errors(recorder)}
    # OpenAI's codes, which clients match (pipecat: item_retrieve_invalid_item_id).
    assert found == {
        "evt_retrieve": "item_retrieve_invalid_item_id",
        "evt_delete": "item_delete_invalid_item_id",
    }


@pytest.mark.parametrize("dialect", dialects("idle-cancel"))
async def test_idle_cancel(plain_server: ServerThread, dialect: Dialect) -> None:
    async with call(plain_server, dialect) as recorder:
        await recorder.connection.response.cancel(event_id="evt_cancel")
        error = (await recorder.wait_for("error")).error
    # OpenAI's code and message: clients drop exactly this message (LiveKit: "Cancellation failed").
    assert (error.code, error.event_id) == ("response_cancel_not_active", "evt_cancel")
    assert error.message == "Cancellation failed: no active response found"
