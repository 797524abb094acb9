"""Translation sessions through the official ``openai`` SDK (``client.realtime.translations``).

Against ``livegen serve`` with ``--llm-base-url`` pointing at ``ChatServer`` (a
scripted OpenAI-compatible chat endpoint on loopback, playing the translator):
the speaker's speech goes in as ``session.input_audio_buffer.append``, the
language model's answer comes back spoken, as ``session.output_audio.delta`` and
``session.output_transcript.delta``; a key minted at the translation
client-secrets route opens a session in its language. Every event is parsed
with the SDK's own ``RealtimeTranslationServerEvent`` (validated, not merely
constructed). Without a language model the session and the key are refused.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI
from openai.types.realtime import RealtimeTranslationServerEvent
from pydantic import TypeAdapter
from websockets.exceptions import InvalidStatus

from conformance.conftest import API_KEY, _serve
from conformance.test_openai_sdk import VERSION
from livegen.models import Registry
from livegen.server.thread import ServerThread
from livegen.voice.translation import MAX_TRANSLATION_TOKENS
from models.cascade.support import ChatServer, speak_afresh
from models.cascade.test_llm_faults import LIMITS, big_text, endless_text, error_500, hang, undeclared

CLIENT = f"openai-python {VERSION} (GA)"
SAID = "Good morning, the train to the city leaves at nine."
TRANSLATED = ("Bonjour, ", "le train pour la ville ", "part à neuf heures.")
EVENTS: TypeAdapter[Any] = TypeAdapter(RealtimeTranslationServerEvent)
CHUNK = 2 * 4800  # 200 ms of 24 kHz PCM16: the frame the SDK's docs advise


@pytest.fixture
def strict_llm_server(voice_registry: Registry, chat: ChatServer) -> Iterator[ServerThread]:
    """The same with the language-model limits small, so that each fault ends in seconds."""
    server = _serve(voice_registry, llm_base_url=chat.url, llm_model="tiny", **LIMITS)
    try:
        server.wait_ready(timeout=300)
        yield server
    finally:
        server.stop()
        voice_registry.load("cascade").use_llm(None, None)


def _sdk(server: ServerThread, key: str = API_KEY) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key=key, base_url=f"{server.http_url}/v1", websocket_base_url=f"{server.ws_url}/v1"
    )


class Translation:
    """A translation connection: a microphone that speaks, then sends silence, and a recorder
    that validates every event against the SDK's types."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.events: list[Any] = []
        self.speech = b""
        self._tasks = [asyncio.ensure_future(self._record()), asyncio.ensure_future(self._microphone())]

    async def _record(self) -> None:
        while True:
            raw = json.loads(await self.connection.recv_bytes())
            self.events.append(EVENTS.validate_python(raw))
            if raw["type"] == "session.closed":
                return

    async def _microphone(self) -> None:
        while True:
            piece, self.speech = self.speech[:CHUNK], self.speech[CHUNK:]
            audio = base64.b64encode(piece.ljust(CHUNK, b"\0")).decode()
            await self.connection.session.input_audio_buffer.append(audio=audio)
            await asyncio.sleep(0.2)

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]

    async def wait_for(self, kind: str, within: float = 120.0) -> Any:
        for _ in range(int(within / 0.05)):
            if found := self.of(kind):
                return found[-1]
            await asyncio.sleep(0.05)
        raise AssertionError(f"no {kind} within {within} s; got {[e.type for e in self.events]}")

    async def until_spoken(self, text: str, within: float = 120.0) -> None:
        for _ in range(int(within / 0.05)):
            if self.spoken() == text:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"spoke {self.spoken()!r}, not {text!r}; got {[e.type for e in self.events]}")

    async def until_spoken_at_end(self, text: str, within: float = 120.0) -> None:
        for _ in range(int(within / 0.05)):
            if self.spoken().endswith(text):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"spoke {self.spoken()!r}, not {text!r} at last")

    def spoken(self) -> str:
        return "".join(e.delta for e in self.of("session.output_transcript.delta"))

    async def close(self) -> None:
        self._tasks[1].cancel()
        await self.connection.session.close()
        await asyncio.wait_for(self._tasks[0], 60)


@pytest.mark.conformance(client=CLIENT, capability="translation-session")
async def test_a_translation_session_speaks_the_translation(
    llm_server: ServerThread, chat: ChatServer
) -> None:
    chat.reply = list(TRANSLATED)
    async with _sdk(llm_server).realtime.translations.connect(model="gpt-realtime-translate") as connection:
        call = Translation(connection)
        created = await call.wait_for("session.created")
        session = {
            "audio": {"output": {"language": "fr"}, "input": {"transcription": {"model": "whisper-1"}}}
        }
        await connection.session.update(session=session)  # type: ignore[arg-type]
        updated = await call.wait_for("session.updated")
        call.speech = speak_afresh(SAID, rate=24_000)
        await call.until_spoken("".join(TRANSLATED))
        await call.close()
    assert created.session.type == "translation" and created.session.model == "gpt-realtime-translate"
    assert updated.session.audio.output.language == "fr"
    assert [e.type for e in call.events].count("session.updated") == 1  # the client's, no other
    assert call.of("session.output_audio.delta"), "the translation was not spoken"
    assert all(base64.b64decode(e.delta) for e in call.of("session.output_audio.delta"))
    heard = "".join(e.delta for e in call.of("session.input_transcript.delta")).lower()
    assert "train" in heard, heard
    assert call.events[-1].type == "session.closed"
    assert not call.of("error"), call.of("error")
    messages = chat.requests[-1]["messages"]
    assert (
        "into the language fr" in messages[0]["content"] and "only the translation" in messages[0]["content"]
    )
    assert "train" in str(messages[-1]["content"]).lower()


@pytest.mark.conformance(client=CLIENT, capability="translation-session")
async def test_a_translation_key_binds_its_language(llm_server: ServerThread) -> None:
    async with _sdk(llm_server) as client:
        minted = await client.realtime.translations.client_secrets.create(
            session={"model": "gpt-realtime-translate", "audio": {"output": {"language": "de"}}}
        )
    assert minted.value.startswith("ek_") and minted.session.audio.output.language == "de"
    async with _sdk(llm_server, minted.value).realtime.translations.connect(
        model="gpt-realtime-translate"
    ) as c:
        created = EVENTS.validate_python(json.loads(await c.recv_bytes()))
    assert created.type == "session.created" and created.session.audio.output.language == "de"
    # A key opens only the kind of session it was minted for.
    with pytest.raises(InvalidStatus, match="401"):
        async with _sdk(llm_server, minted.value).realtime.connect(model="gpt-realtime"):
            pass
    async with _sdk(llm_server) as client:
        realtime_key = (await client.realtime.client_secrets.create()).value
    with pytest.raises(InvalidStatus, match="401"):
        async with _sdk(llm_server, realtime_key).realtime.translations.connect(
            model="gpt-realtime-translate"
        ):
            pass


async def test_without_a_language_model_translation_is_refused(plain_server: ServerThread) -> None:
    async with _sdk(plain_server) as client:
        async with client.realtime.translations.connect(model="gpt-realtime-translate") as connection:
            refused = EVENTS.validate_python(json.loads(await connection.recv_bytes()))
        with pytest.raises(openai.BadRequestError) as minting:
            await client.realtime.translations.client_secrets.create(
                session={"model": "gpt-realtime-translate"}
            )
    assert refused.type == "error" and refused.error.code == "invalid_value"
    assert "--llm-base-url" in refused.error.message
    assert "--llm-base-url" in str(minting.value)


async def test_an_unknown_translation_event_is_refused_and_the_session_goes_on(
    llm_server: ServerThread,
) -> None:
    async with _sdk(llm_server).realtime.translations.connect(model="gpt-realtime-translate") as connection:
        call = Translation(connection)
        await call.wait_for("session.created")
        await connection.send({"type": "response.create"})  # type: ignore[arg-type, typeddict-item]
        error = await call.wait_for("error")
        await connection.session.update(session={"audio": {"output": {"language": "es"}}})
        updated = await call.wait_for("session.updated")
        await call.close()
    assert error.error.code == "invalid_value" and "session.close" in error.error.message
    assert updated.session.audio.output.language == "es"


#: Language-model faults (``tests/models/cascade/test_llm_faults.py``'s) and the code each is told by.
TRANSLATION_FAULTS = {
    "error_500": (error_500, "llm_failed"),
    "hang": (hang, "llm_timeout"),  # past --llm-first-token-timeout (2 s here)
    "tool_call": (undeclared, "llm_invalid_tool_call"),
    "big_text": (big_text, "llm_output_too_large"),
    "endless_text": (endless_text, "llm_output_too_large"),
}


@pytest.mark.parametrize("fault", list(TRANSLATION_FAULTS))
async def test_a_failed_translation_is_an_error_and_the_session_goes_on(
    strict_llm_server: ServerThread, chat: ChatServer, fault: str
) -> None:
    answer, code = TRANSLATION_FAULTS[fault]
    chat.faults["train"] = answer  # the utterance's transcript says "train"
    connect = _sdk(strict_llm_server).realtime.translations.connect
    async with connect(model="gpt-realtime-translate") as connection:
        call = Translation(connection)
        await call.wait_for("session.created")
        call.speech = speak_afresh(SAID, rate=24_000)
        failed = await call.wait_for("error")
        spoken_before = call.spoken()
        chat.faults.clear()
        chat.reply = list(TRANSLATED)
        call.speech = speak_afresh("The weather is lovely today.", rate=24_000)
        await call.until_spoken_at_end("".join(TRANSLATED))
        await call.close()
    assert failed.error.code == code, failed
    assert len(spoken_before.split()) <= MAX_TRANSLATION_TOKENS  # endless text: spoken within the cap
    assert len(call.of("error")) == 1 and call.events[-1].type == "session.closed"
