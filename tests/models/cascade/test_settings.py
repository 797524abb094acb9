"""The cascade's options as one typed value (``CascadeSettings``) that ``livegen serve`` hands down.

Real ``livegen serve`` subprocesses show, on ``/health``'s voice block, what the model runs:
the flags reach it, each beating its ``LIVEGEN_`` variable; the variables alone still choose when
no flag is given; a bad value stops the server at startup, naming the flag (and the variable).
The chat endpoint's key (``--llm-api-key``, ``LIVEGEN_LLM_API_KEY``) reaches it through a server.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import websockets

from livegen.errors import ConfigError
from livegen.models.cascade import model as cascade_model
from livegen.models.cascade.settings import CascadeSettings
from livegen.server.thread import ServerThread

from .support import ChatServer

#: The variables of the cascade's options: none leaks from the test's environment into a server's.
VARIABLES = ("VAD", "ASR_MODEL", "ASR_MODEL_PATH", "ASR_BATCH", "ASR_WORKERS", "ASR_THREADS")
VARIABLES += ("TTS_WORKERS", "TTS_THREADS")


def _environment(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.removeprefix("LIVEGEN_") not in VARIABLES}
    return {**env, **{f"LIVEGEN_{name}": value for name, value in variables.items()}}


@pytest.fixture
def serve() -> Iterator[Callable[..., dict[str, Any]]]:
    """``livegen serve`` in a subprocess with these variables and arguments; its voice health once
    it is ready."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(*argv: str, **variables: str) -> dict[str, Any]:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        command = [sys.executable, "-m", "livegen", "serve", "--port", str(port), "--world-model", "none"]
        env = _environment(**variables)
        process = subprocess.Popen([*command, *argv], env=env, stderr=subprocess.DEVNULL)
        processes.append(process)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                health = httpx.get(f"http://127.0.0.1:{port}/health")
                if health.status_code == 200:
                    voice: dict[str, Any] = health.json()["services"]["voice"]
                    return voice
            assert process.poll() is None, "the server exited"
            time.sleep(0.3)
        raise AssertionError("the server did not get ready")

    yield start
    for process in processes:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.slow
def test_the_flags_reach_the_model_and_beat_the_variables(serve: Callable[..., dict[str, Any]]) -> None:
    argv = ("--vad", "ggml", "--asr-batch", "4", "--asr-workers", "1", "--asr-threads", "1")
    argv += ("--asr-model", "whisper-tiny.en", "--tts-workers", "1")
    voice = serve(*argv, VAD="onnx", ASR_MODEL="whisper-base", ASR_WORKERS="2", TTS_WORKERS="2")
    assert voice["vad"] == "ggml"
    assert voice["asr"] == {"model": "whisper-tiny.en", "batch": 4, "workers": 1, "threads": 1}
    assert len(voice["tts_workers"]) == 1


@pytest.mark.slow
def test_the_variables_choose_when_no_flag_is_given(serve: Callable[..., dict[str, Any]]) -> None:
    voice = serve(VAD="GGML", ASR_MODEL="whisper-tiny.en", ASR_BATCH="1", TTS_WORKERS="1")
    assert voice["vad"] == "ggml"
    # One decode at a time, on 2 threads.
    assert voice["asr"] == {"model": "whisper-tiny.en", "batch": 1, "workers": 1, "threads": 2}
    assert len(voice["tts_workers"]) == 1


@pytest.mark.parametrize(
    ("argv", "variables", "named"),
    [
        (["--asr-workers", "0"], {}, ["--asr-workers"]),
        (["--tts-threads", "0"], {}, ["--tts-threads"]),
        ([], {"ASR_THREADS": "0"}, ["--asr-threads", "LIVEGEN_ASR_THREADS"]),
        ([], {"VAD": "webrtc"}, ["--vad", "LIVEGEN_VAD", "'webrtc'"]),
    ],
)
def test_a_bad_value_stops_the_server_at_startup_by_name(
    argv: list[str], variables: dict[str, str], named: list[str]
) -> None:
    command = [sys.executable, "-m", "livegen", "serve", "--port", "0", "--world-model", "none", *argv]
    env = _environment(**variables)
    refused = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode == 2, refused.stderr
    assert all(name in refused.stderr for name in named), refused.stderr


def test_a_setting_given_beats_its_variable_and_a_bad_one_is_named() -> None:
    environ = {"LIVEGEN_VAD": "ggml", "LIVEGEN_ASR_WORKERS": "3", "LIVEGEN_TTS_THREADS": "2"}
    resolved = CascadeSettings(vad="onnx", asr_workers=1).with_env(environ)
    assert resolved == CascadeSettings(vad="onnx", asr_workers=1, tts_threads=2)
    assert CascadeSettings().with_env({}) == CascadeSettings()
    with pytest.raises(ConfigError, match="--asr-batch 0"):
        CascadeSettings(asr_batch=0)
    with pytest.raises(ConfigError, match="LIVEGEN_TTS_WORKERS='two'"):
        CascadeSettings().with_env({"LIVEGEN_TTS_WORKERS": "two"})
    with pytest.raises(ConfigError, match="--vad 'silero'"):
        CascadeSettings(vad="silero")


@pytest.mark.slow
def test_the_model_loaded_once_refuses_other_settings(cascade: Any) -> None:
    assert cascade_model.load(CascadeSettings()) is cascade
    with pytest.raises(ConfigError, match="loaded once per process"):
        cascade_model.load(CascadeSettings(vad="ggml"))


@pytest.mark.slow
@pytest.mark.parametrize("given", ["option", "variable"])
async def test_the_chat_endpoint_gets_the_servers_key(
    given: str,
    start_server: Callable[..., ServerThread],
    cascade: Any,
    chat_server: ChatServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--llm-api-key`` or ``LIVEGEN_LLM_API_KEY``: before, the variable was read when the model
    loaded and then dropped when the server set its endpoint, and there was no option."""
    chat_server.reply = ["Hello there."]
    options: dict[str, Any] = {"llm_api_key": "sk-served"} if given == "option" else {}
    monkeypatch.setenv("LIVEGEN_LLM_API_KEY", "sk-served" if given == "variable" else "sk-other")
    server = start_server(world_model="none", llm_base_url=chat_server.url, llm_model="tiny", **options)
    try:
        server.wait_ready(timeout=120)
        async with websockets.connect(f"{server.ws_url}/v1/realtime?model=gpt-realtime") as ws:
            item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}
            await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
            await ws.send(json.dumps({"type": "response.create"}))
            while (event := json.loads(await ws.recv()))["type"] != "response.done":
                assert event["type"] != "error", event
        assert event["response"]["status"] == "completed", event
        assert chat_server.requests[-1]["auth"] == "Bearer sk-served"
    finally:
        cascade.use_llm(None, None)  # the model is shared by every server of this process
