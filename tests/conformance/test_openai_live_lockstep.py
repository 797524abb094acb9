"""GPT-Live over a native duplex (lockstep) model: ``moshi-tiny`` through ``client.live.connect``.

A real server runs ``--voice-model moshi-tiny`` on its frame clock (the
model decides frame by frame when to speak, as GPT-Live's model does). The
tiny model's speech is noise and its inner text random letters: what is
checked is the mapping, not what it says. Its speech comes back on the
gapless output stream with its words placed on it; what it cannot honour
(instructions, commentary) is refused by name with the session going on.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest

from conformance.support import until
from conformance.test_openai_live import connect, started
from livegen.server.thread import ServerThread

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.conformance(client="openai-python 3.57.0 (GPT-Live)", capability="live-lockstep")


@pytest.fixture
def moshi_server(start_server: Callable[..., ServerThread]) -> ServerThread:
    from conformance.conftest import API_KEY

    server = start_server(voice_model="moshi-tiny", world_model="none", api_key=API_KEY)
    server.wait_ready(timeout=180)
    return server


async def test_moshi_tiny_speaks_on_the_live_stream(moshi_server: ServerThread) -> None:
    async with connect(moshi_server, {"model": "gpt-live-1"}) as live:
        first = await started(live)
        assert first["type"] == "session.started", first
        # The microphone sends silence: speech now would cut the model's first turn if it began
        # first, and a cut model stays muted while it goes on speaking, up to MUTE_LIMIT_MS
        # (runtime/voice/lockstep_voice.py): this test watches the model's own first turn.
        live.listen()

        seen = {"frames": 0, "speaking": 0}

        def spoken() -> int:
            """Frames of speech so far (each frame decoded once: the stream is 25 frames a second)."""
            frames = live.of("session.output_audio.delta")
            for frame in frames[seen["frames"] :]:
                seen["speaking"] += any(base64.b64decode(frame["delta"]))
            seen["frames"] = len(frames)
            return seen["speaking"]

        await until(lambda: spoken() and live.of("session.output_transcript.delta"), 90, "the model speaking")
        await live.connection.send(
            {"type": "session.commentary.append", "event_id": "say_1", "content": "Hi."}
        )
        refused = (await until(lambda: live.of("error"), 30, "the refusal"))[0]["error"]
        assert refused["code"] == "unsupported_parameter" and refused["client_event_id"] == "say_1"
        assert "session.commentary.append" in refused["message"]
        await live.connection.send({"type": "session.input_audio.mute", "event_id": "mute_1"})
        await until(lambda: live.of("session.input_audio.muted"), 30, "the session goes on")


async def test_instructions_are_refused_by_name_on_a_native_model(moshi_server: ServerThread) -> None:
    async with connect(moshi_server, {"model": "gpt-live-1", "instructions": "Be brief."}) as live:
        error = (await until(lambda: live.of("error"), 30, "the refusal"))[0]
        assert error["error"]["code"] == "unsupported_parameter"
        assert error["error"]["param"] == "session.instructions"
        assert not live.of("session.started")
