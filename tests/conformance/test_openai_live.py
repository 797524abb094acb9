"""OpenAI's GPT-Live API through the official ``openai`` SDK (``client.live.connect``), unchanged.

Against ``livegen serve`` (the embedded cascade), with only the SDK's base URL
pointed at it: ``session.start`` then ``session.started``; a spoken turn, the
microphone streaming 20 ms every 20 ms as ``session.input_audio.append``, with
the user's words back as ``session.input_transcript.delta`` and the answer as
``session.output_audio.delta`` (a gapless real-time stream, silence included)
and ``session.output_transcript.delta`` placed on it; appends acknowledged;
mute and unmute; ``session.close`` ending with ``session.closed``. Every event
livegen sends is validated by the SDK's own ``ServerEvent`` union (a pydantic
``TypeAdapter``), not merely constructed. Bad input gets OpenAI's error and the
session goes on.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from openai import AsyncOpenAI
from openai.types.live import ServerEvent
from pydantic import TypeAdapter

from conformance.conftest import API_KEY
from conformance.support import QUESTION, Microphone, until
from conformance.test_openai_sdk import VERSION
from livegen.server.thread import ServerThread

CLIENT = f"openai-python {VERSION} (GPT-Live)"
EVENTS: TypeAdapter[Any] = TypeAdapter(ServerEvent)
START = {"model": "gpt-live-1", "instructions": "You are a helpful voice assistant."}


def conformance(capability: str) -> pytest.MarkDecorator:
    return pytest.mark.conformance(client=CLIENT, capability=capability)


class Live:
    """One ``client.live.connect`` connection: a recorder validating every event, and a microphone."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.raw: list[dict[str, Any]] = []
        self.events: list[Any] = []
        self._reader = asyncio.ensure_future(self._read())
        self.microphone: Microphone | None = None

    async def _read(self) -> None:
        while True:
            raw = json.loads(await self.connection.recv_bytes())
            self.events.append(EVENTS.validate_python(raw))  # the SDK's own types, validated
            self.raw.append(raw)
            if raw["type"] == "session.closed":
                return

    def listen(self) -> Microphone:
        async def send(pcm: bytes) -> None:
            await self.connection.send(
                {"type": "session.input_audio.append", "audio": base64.b64encode(pcm).decode()}
            )

        self.microphone = Microphone(send)
        return self.microphone

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.raw if e["type"] == kind]

    def text(self, kind: str) -> str:
        return "".join(e["delta"] for e in self.of(kind))

    async def stop(self) -> None:
        if self.microphone is not None:
            await self.microphone.stop()
        self._reader.cancel()


@asynccontextmanager
async def connect(
    server: ServerThread, session: dict[str, Any] | None = None, key: str = API_KEY
) -> AsyncIterator[Live]:
    client = AsyncOpenAI(
        api_key=key, base_url=f"{server.http_url}/v1", websocket_base_url=f"{server.ws_url}/v1"
    )
    async with client.live.connect() as connection:
        await connection.send({"type": "session.start", "event_id": "start_1", "session": session or START})
        recorder = Live(connection)
        try:
            yield recorder
        finally:
            await recorder.stop()


async def started(live: Live) -> dict[str, Any]:
    return (await until(lambda: live.of("session.started") or live.of("error"), 60, "session.started"))[0]


@conformance("spoken-turn")
async def test_a_spoken_turn_has_both_transcripts_and_real_time_audio(
    plain_server: ServerThread, speech: Any
) -> None:
    async with connect(plain_server) as live:
        first = await started(live)
        assert first["type"] == "session.started" and first["client_event_id"] == "start_1"
        assert first["session"]["model"] == "gpt-live-1" and first["session"]["status"] == "active"
        live.listen().say(speech(QUESTION))
        await until(
            lambda: (
                "84" in live.text("session.output_transcript.delta")
                or "eighty" in live.text("session.output_transcript.delta").lower()
            ),
            90,
            "the answer",
        )
        await until(
            lambda: [f for f in live.of("session.output_audio.delta") if any(base64.b64decode(f["delta"]))],
            30,
        )
        heard = live.text("session.input_transcript.delta").lower()
        assert "twelve" in heard or "12" in heard
        frames = live.of("session.output_audio.delta")
        # One gapless stream: each frame starts where the one before ended, speech and silence alike.
        assert all(b["start_ms"] == a["end_ms"] for a, b in itertools.pairwise(frames))
        speaking = [f for f in frames if any(base64.b64decode(f["delta"]))]
        assert speaking, "the answer's audio"
        pieces = live.of("session.output_transcript.delta")
        assert speaking[0]["start_ms"] <= pieces[0]["start_ms"] < speaking[-1]["end_ms"]


@conformance("live-appends")
async def test_appends_are_acknowledged_and_commentary_makes_the_model_speak(
    plain_server: ServerThread,
) -> None:
    async with connect(plain_server) as live:
        await started(live)
        live.listen()
        for kind in ("instructions", "thinking", "commentary"):
            await live.connection.send(
                {
                    "type": f"session.{kind}.append",
                    "event_id": f"{kind}_1",
                    "content": "Greet the caller.",
                    "delegation_id": None,
                }
            )
        for kind in ("instructions", "thinking", "commentary"):
            ack = (await until(lambda k=kind: live.of(f"session.{k}.appended"), 30, kind))[0]
            assert ack["client_event_id"] == f"{kind}_1" and ack["end_ms"] >= ack["start_ms"] >= 0
        await until(lambda: live.text("session.output_transcript.delta"), 60, "the model speaking")
        assert not live.of("error")


@conformance("live-mute")
async def test_mute_and_unmute_are_acknowledged_and_muted_speech_is_not_heard(
    plain_server: ServerThread, speech: Any
) -> None:
    async with connect(plain_server) as live:
        await started(live)
        microphone = live.listen()
        await live.connection.send({"type": "session.input_audio.mute", "event_id": "mute_1"})
        await until(lambda: live.of("session.input_audio.muted"), 30, "muted")
        microphone.say(speech(QUESTION))
        await asyncio.sleep(5)  # the question, spoken and past: the model heard silence
        assert not live.of("session.input_transcript.delta")
        await live.connection.send({"type": "session.input_audio.unmute", "event_id": "unmute_1"})
        unmuted = (await until(lambda: live.of("session.input_audio.unmuted"), 30, "unmuted"))[0]
        assert unmuted["client_event_id"] == "unmute_1"
        microphone.say(speech(QUESTION))
        await until(lambda: live.text("session.input_transcript.delta"), 60, "the user heard again")


@conformance("live-close")
async def test_session_close_ends_with_session_closed_and_later_events_are_refused(
    plain_server: ServerThread,
) -> None:
    async with connect(plain_server) as live:
        await started(live)
        await live.connection.send({"type": "session.close", "event_id": "close_1"})
        await live.connection.send({"type": "session.input_audio.mute", "event_id": "late_1"})
        closed = (await until(lambda: live.of("session.closed"), 30, "session.closed"))[0]
        assert closed["reason"] == "close_requested" and closed["usage"]["seconds"] >= 0
        refused = [e for e in live.of("error") if e["error"]["client_event_id"] == "late_1"]
        assert [e["error"]["code"] for e in refused] in ([], ["session_closed"])


@conformance("live-errors")
async def test_bad_input_gets_openais_error_and_the_session_goes_on(plain_server: ServerThread) -> None:
    async with connect(plain_server) as live:
        await started(live)
        bad = [
            {"type": "session.commentary.append", "event_id": "long_1", "content": "word " * 600},
            {"type": "session.input_audio.mute", "event_id": "extra_1", "mystery": 1},
            {"type": "session.dance", "event_id": "kind_1"},
        ]
        for event in bad:
            await live.connection.send_raw(json.dumps(event))
        await live.connection.send_raw("{not json")
        await until(lambda: len(live.of("error")) == 4, 30, "four errors")
        errors = {e["error"]["client_event_id"]: e["error"] for e in live.of("error")}
        assert errors["long_1"]["code"] == "append_too_long" and errors["long_1"]["param"] == "content"
        assert errors["extra_1"] == {
            "type": "invalid_request_error",
            "code": "unknown_parameter",
            "message": "Unknown parameter: 'mystery'.",
            "param": "mystery",
            "client_event_id": "extra_1",
        }
        assert errors["kind_1"]["code"] == "invalid_value" and errors["kind_1"]["param"] == "type"
        assert errors[None]["code"] == "invalid_json"
        await live.connection.send({"type": "session.input_audio.mute", "event_id": "mute_1"})
        await until(lambda: live.of("session.input_audio.muted"), 30, "the session goes on")


@conformance("live-errors")
async def test_an_unknown_field_in_session_start_is_refused(plain_server: ServerThread) -> None:
    async with connect(plain_server, {**START, "turn_detection": {"type": "server_vad"}}) as live:
        error = (await until(lambda: live.of("error"), 30, "the refusal"))[0]
        assert error["error"]["code"] == "unknown_parameter"
        assert error["error"]["message"] == "Unknown parameter: 'session.turn_detection'."
        assert error["error"]["param"] == "session.turn_detection"
        assert error["client_event_id"] == "start_1"
        assert not live.of("session.started")


@conformance("live-keys")
async def test_an_ephemeral_key_opens_a_session_and_a_wrong_key_gets_openais_error(
    plain_server: ServerThread,
) -> None:
    async with AsyncOpenAI(api_key=API_KEY, base_url=f"{plain_server.http_url}/v1") as sdk:
        ephemeral = (await sdk.realtime.client_secrets.create()).value
    async with connect(plain_server, key=ephemeral) as live:
        assert (await started(live))["type"] == "session.started"
    with pytest.raises(Exception) as refused:  # refused at the upgrade, as /v1/realtime is
        async with connect(plain_server, key="sk-wrong") as live:
            await started(live)
    assert "401" in str(refused.value)
