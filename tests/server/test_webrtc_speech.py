"""A spoken WebRTC call to the embedded cascade, with an aiortc caller and an ephemeral key.

The question is spoken by espeak-ng (``tests/browser/speech.py``), streamed as
Opus on the caller's track; the answer must come back on the server's track as
speech that the cascade's own recogniser hears as the right answer, with both
transcripts on the ``oai-events`` data channel. Talking over a long answer
must silence the track at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browser.speech import read_speech, write_question, write_speech
from livegen.client.webrtc import Caller, loudness, mint
from livegen.server import ServerConfig
from livegen.server.thread import ServerThread
from models.cascade.support import heard
from sharing import Registries

pytestmark = pytest.mark.slow  # loads the real voice models

KEY = "server-key"


@pytest.fixture(scope="module")
def server(registries: Registries) -> Iterator[ServerThread]:
    config = ServerConfig(api_key=KEY, world_model="none")
    running = ServerThread(config, registries.for_config(config)).start()  # the run's cascade
    try:
        running.wait_ready(timeout=180)
        yield running
    finally:
        running.stop()


def cascade(server: ServerThread) -> Any:
    service = next(s for s in server.app.state.livegen.services if s.name == "voice")
    return service.engine.models[service.engine.default_model]


async def test_a_spoken_question_gets_a_spoken_answer_on_the_track(
    server: ServerThread, tmp_path: Path
) -> None:
    spoken = write_question(tmp_path / "q.wav", "what is twelve times seven", lead_s=0.5, tail_s=1.5)
    question = read_speech(spoken, 24_000)
    caller = Caller(server.http_url, mint(server.http_url, api_key=KEY)["value"])
    try:
        await caller.connect()
        await caller.event("session.created")
        caller.microphone.say(question + bytes(2 * 24_000 * 8))  # then silence, as a microphone does
        asked = time.monotonic()
        transcript = await caller.event("conversation.item.input_audio_transcription.completed")
        assert "twelve" in transcript["transcript"].lower() or "12" in transcript["transcript"]
        done = await caller.event("response.done")
        await caller.event("output_audio_buffer.stopped")
        assert done["response"]["status"] == "completed"
        said = " ".join(
            part.get("transcript") or ""
            for item in done["response"]["output"]
            for part in item.get("content", [])
        )
        assert "84" in said or "eighty" in said.lower()
        assert not [e for e in caller.events if e["type"] == "response.output_audio.delta"]
        answer = caller.audio_since(asked)
        assert loudness(answer) > 300
        words = heard(cascade(server), answer).lower()
        assert "84" in words or "eighty" in words, words
        assert (await caller.hangup()).status_code == 200  # with the ephemeral key
        await caller.event("session.closed", within=10)
    finally:
        await caller.close()


async def test_talking_over_the_answer_silences_the_track(server: ServerThread, tmp_path: Path) -> None:
    # A long answer (the help text), talked over once it has played for a second.
    question = read_speech(write_question(tmp_path / "q.wav", "what can you do", 0.5, 0.5), 24_000)
    again = read_speech(write_speech(tmp_path / "again.wav", [(0.1, "what time is it")], tail_s=1.0), 24_000)
    caller = Caller(server.http_url, mint(server.http_url, api_key=KEY)["value"])
    try:
        await caller.connect()
        caller.microphone.say(question + bytes(2 * 24_000 * 3))
        started = await caller.event("output_audio_buffer.started")
        await asyncio.sleep(1.5)
        assert loudness(caller.audio_since(time.monotonic() - 1.0)) > 300  # the answer is playing
        caller.microphone.say(again + bytes(2 * 24_000 * 8))
        cleared = await caller.wait_for(
            lambda e: (
                e["type"] == "output_audio_buffer.cleared" and e["response_id"] == started["response_id"]
            ),
            what="the talked-over answer cleared",
        )
        assert cleared
        cut_at = time.monotonic()
        await asyncio.sleep(0.6)  # frames in flight arrive; then the track must be silent
        assert loudness(caller.audio_since(cut_at + 0.3, cut_at + 0.6)) < 50
        done = await caller.wait_for(
            lambda e: e["type"] == "response.done" and e["response"]["id"] == started["response_id"],
            what="the talked-over response's end",
        )
        assert done["response"]["status"] == "cancelled"
        truncated = await caller.event("conversation.item.truncated")
        assert 500 <= truncated["audio_end_ms"] <= 6000  # what went out on the track, not the whole answer
    finally:
        await caller.close()
