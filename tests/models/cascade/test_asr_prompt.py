"""A transcription ``prompt`` is bounded as OpenAI bounds it, and tokenised once, not at every decode.

A 6 MiB prompt was once taken and re-tokenised by every decode of its
session; the tokeniser holds the GIL while it works, so every other session
and ``/health`` waited seconds. Now a prompt over OpenAI's 1024 characters is
refused at ``session.update`` (OpenAI's ``string_above_max_length``) and the
session goes on as it was; a prompt the session keeps is tokenised once.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np
import pytest
from openai import AsyncOpenAI

from livegen.server.thread import ServerThread
from models.cascade.support import speak_as_user, wire_audio

pytestmark = pytest.mark.slow

#: OpenAI's longest transcription prompt, in characters.
MAX_PROMPT_CHARS = 1024
#: A prompt of the largest size taken: names and spellings, as a client sends them.
FULL_PROMPT = ("Zanzibar, quokka, Ouagadougou. " * 40)[:MAX_PROMPT_CHARS]


def _sdk(server: ServerThread) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key="unused", base_url=f"{server.http_url}/v1", websocket_base_url=f"{server.ws_url}/v1"
    )


def _transcription(prompt: str) -> dict[str, Any]:
    transcription = {"model": "whisper-1", "prompt": prompt}
    return {"type": "realtime", "audio": {"input": {"transcription": transcription, "turn_detection": None}}}


async def _transcript(connection: Any, pcm24: bytes) -> str:
    """Append ``pcm24``, commit it, and wait for its completed transcript."""
    await connection.input_audio_buffer.append(audio=base64.b64encode(pcm24).decode())
    await connection.input_audio_buffer.commit()
    async for event in connection:
        if event.type == "conversation.item.input_audio_transcription.completed":
            return str(event.transcript)
        assert event.type != "error", event
    raise AssertionError("the connection closed before the transcript")


async def test_a_huge_prompt_is_refused_and_a_full_one_does_not_hold_up_another_session(
    default_server: ServerThread, cascade: Any
) -> None:
    huge = "names " * (1 << 20)  # 6 MiB, as in the report
    question = wire_audio(cascade, "What time is it?", trail_s=0.3)
    async with (
        _sdk(default_server).realtime.connect(model="gpt-realtime") as prompted,
        _sdk(default_server).realtime.connect(model="gpt-realtime") as other,
    ):
        for connection in (prompted, other):
            assert (await connection.recv()).type == "session.created"
        await prompted.session.update(session=_transcription(huge))  # type: ignore[arg-type]
        refused = await prompted.recv()
        await prompted.session.update(session=_transcription(FULL_PROMPT))  # type: ignore[arg-type]
        kept = await prompted.recv()
        await other.session.update(session=_transcription(""))  # type: ignore[arg-type]
        assert (await other.recv()).type == "session.updated"
        # Both decode at once: the one with a full prompt first, the other right behind it.
        heard = await asyncio.gather(_transcript(prompted, question), _transcript(other, question))
    assert refused.type == "error", refused
    param = "session.audio.input.transcription.prompt"
    assert (refused.error.type, refused.error.code, refused.error.param) == (
        "invalid_request_error",
        "string_above_max_length",
        param,
    )
    assert refused.error.message == (
        f"Invalid '{param}': string too long. Expected a string with maximum length 1024, "
        f"but got a string with length {len(huge)} instead."
    )
    assert kept.type == "session.updated"
    assert kept.session.audio.input.transcription.prompt == FULL_PROMPT
    for text in heard:
        assert "time" in text.lower() and "quokka" not in text.lower(), heard


def test_a_sessions_prompt_is_tokenised_once_whatever_the_number_of_decodes(
    cascade: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    recognizer = cascade.recognizer
    tokenizer = recognizer._tokenizer("")
    encoded: list[str] = []
    encode = tokenizer.encode

    def counting(text: str) -> list[int]:
        encoded.append(text)
        return list(encode(text))

    monkeypatch.setattr(tokenizer, "encode", counting)
    audio = np.frombuffer(speak_as_user(cascade, "What time is it?", trail_s=0.3), "<i2")
    samples = audio.astype(np.float32) / 32768.0
    prompt = f"{FULL_PROMPT[:-8]} {len(encoded)}"  # a prompt no other test has used
    for _ in range(3):
        recognizer.transcribe(samples, prompt=prompt)
    recognizer.transcribe_batch([samples, samples], prompt=prompt)
    assert sum(prompt.strip() in text for text in encoded) == 1, len(encoded)
