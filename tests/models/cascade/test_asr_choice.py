"""Picking a recogniser with one flag: ``--asr-model``, ``--asr-model-path``, and a session's name.

A local CTranslate2 Whisper directory is made here from the packaged tiny.en
files (links, under a name of its own), as a user's Whisper small or
distil-whisper directory would be; a real ``livegen serve`` subprocess is
started with it, and a client names it over the wire. Names and directories
that are wrong are refused by name: at startup, and at ``session.update``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from click.testing import CliRunner

from livegen.cli import main
from livegen.errors import ConfigError
from livegen.models.asr.local import LOCAL_FILES, local_choice
from livegen.models.cascade import asr, assets
from livegen.models.cascade import model as cascade_model
from livegen.server.thread import ServerThread
from models.cascade.support import speak_as_user


@pytest.fixture
def local_whisper(tmp_path: Path) -> Path:
    """A CTranslate2 Whisper directory named ``my-whisper``: the packaged tiny.en's files, linked."""
    directory = tmp_path / "my-whisper"
    directory.mkdir()
    for packaged in assets.whisper_dir().iterdir():
        (directory / packaged.name).symlink_to(packaged)
    return directory


def test_a_directory_that_is_not_a_whisper_model_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a directory"):
        local_choice(tmp_path / "absent")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "model.bin").write_bytes(b"")
    with pytest.raises(
        ConfigError, match=r"lacks config\.json, tokenizer\.json, vocabulary\.json or vocabulary\.txt"
    ):
        local_choice(tmp_path / "half")
    (tmp_path / "whisper-base").mkdir()
    for name in (*LOCAL_FILES, "vocabulary.txt"):
        (tmp_path / "whisper-base" / name).write_bytes(b"")
    with pytest.raises(ConfigError, match="name of a packaged recogniser"):
        local_choice(tmp_path / "whisper-base")


def test_a_local_directory_is_one_more_recogniser_and_the_default(
    local_whisper: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LIVEGEN_ASR_MODEL", raising=False)  # conftest.py's pin would name tiny.en
    choices = cascade_model.asr_choices(str(local_whisper))
    assert list(choices) == [*asr.CHOICES, "my-whisper"]
    assert cascade_model.default_asr_model(choices) == "my-whisper"
    assert cascade_model.default_asr_model(choices, "whisper-base") == "whisper-base"
    with pytest.raises(ConfigError, match=r"'whisper-huge'; choose one of .*my-whisper"):
        cascade_model.default_asr_model(choices, "whisper-huge")


@pytest.mark.slow
def test_a_local_directory_hears(cascade: Any, local_whisper: Path) -> None:
    import numpy as np

    recognizer = asr.Recognizer.of(local_choice(local_whisper), threads=1)
    pcm = speak_as_user(cascade, "What time is it?", trail_s=0.3)
    text = recognizer.transcribe(np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0).text
    assert recognizer.name == "my-whisper"
    assert "time" in text.lower(), text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--asr-model", "whisper-huge"], "unknown speech recogniser 'whisper-huge'"),
        (
            ["--asr-model-path", "/nonexistent/whisper-small"],
            "'/nonexistent/whisper-small' is not a directory",
        ),
    ],
)
def test_serve_refuses_an_unknown_recogniser_at_startup(argv: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["serve", "--world-model", "none", *argv])
    assert result.exit_code == 2, result.output
    assert message in result.output


@pytest.fixture
def serve(local_whisper: Path) -> Iterator[Callable[..., str]]:
    """``livegen serve`` in a subprocess with more arguments; its base URL once /health answers."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(*argv: str) -> str:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        command = [sys.executable, "-m", "livegen", "serve", "--port", str(port), "--world-model", "none"]
        processes.append(subprocess.Popen([*command, *argv], stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    return f"127.0.0.1:{port}"
            assert processes[-1].poll() is None, "the server exited"
            time.sleep(0.3)
        raise AssertionError("the server did not get ready")

    yield start
    for process in processes:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.slow
async def test_serve_with_asr_model_path_hears_with_it_and_sessions_name_it(
    serve: Callable[..., str], local_whisper: Path, cascade: Any
) -> None:
    host = serve("--asr-model-path", str(local_whisper))
    pcm = speak_as_user(cascade, "What time is it?", trail_s=0.3)
    wav = _wav(pcm)
    async with httpx.AsyncClient(timeout=120) as client:
        heard = await client.post(
            f"http://{host}/v1/audio/transcriptions",
            data={"model": "my-whisper"},
            files={"file": ("said.wav", wav)},
        )
    assert heard.status_code == 200, heard.text
    assert "time" in heard.json()["text"].lower()
    async with websockets.connect(f"ws://{host}/v1/realtime?model=gpt-realtime") as ws:
        await _until(ws, "session.created")
        updated = await _update_transcription(ws, "my-whisper")
        assert updated["type"] == "session.updated", updated
        assert updated["session"]["audio"]["input"]["transcription"]["model"] == "my-whisper"


async def _update_transcription(ws: Any, model: str) -> dict[str, Any]:
    transcription = {"transcription": {"model": model}}
    update = {"type": "session.update", "session": {"type": "realtime", "audio": {"input": transcription}}}
    await ws.send(json.dumps(update))
    while True:
        event: dict[str, Any] = json.loads(await ws.recv())
        if event["type"] in ("session.updated", "error"):
            return event


async def _until(ws: Any, kind: str) -> dict[str, Any]:
    while True:
        event: dict[str, Any] = json.loads(await ws.recv())
        if event["type"] == kind:
            return event


def _wav(pcm: bytes, rate: int = 16_000) -> bytes:
    import io
    import wave

    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(pcm)
    return buffer.getvalue()


@pytest.mark.slow
async def test_session_update_refuses_an_unknown_recogniser_by_name(default_server: ServerThread) -> None:
    async with websockets.connect(f"{default_server.ws_url}/v1/realtime?model=gpt-realtime") as ws:
        await _until(ws, "session.created")
        refused = await _update_transcription(ws, "whisper-huge")
        assert refused["type"] == "error", refused
        error = refused["error"]
        assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_value")
        assert error["param"] == "session.audio.input.transcription.model"
        assert "'whisper-huge'" in error["message"] and "'whisper-base'" in error["message"]
        for name in ("whisper-base", "gpt-4o-transcribe", "whisper-1"):
            updated = await _update_transcription(ws, name)
            assert updated["type"] == "session.updated", updated
            assert updated["session"]["audio"]["input"]["transcription"]["model"] == name
