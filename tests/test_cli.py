"""The `livegen` command: help texts, model listing, and a real `serve` process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
from click.testing import CliRunner

from livegen.cli import main


def test_help_lists_commands() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for command in ("serve", "models", "bench"):
        assert command in result.output


def test_serve_help_documents_every_option() -> None:
    result = CliRunner().invoke(main, ["serve", "--help"])
    assert result.exit_code == 0
    for option in ("--host", "--port", "--api-key", "--voice-model", "--world-model", "--log-level"):
        assert option in result.output


def test_serve_takes_every_default_from_server_config() -> None:
    """A setting's default is stated once, in ``ServerConfig``: an option that restated it
    differently (or forgot a change there) would serve another value than a test's server."""
    import dataclasses

    import click

    from livegen.cli.serve import serve
    from livegen.server.config import ServerConfig

    fields = {f.name: f for f in dataclasses.fields(ServerConfig)}
    ctx = click.Context(serve)
    checked = []
    for param in serve.params:
        field = fields.get(param.name or "")
        if field is None or field.default is dataclasses.MISSING or param.envvar:
            continue  # a factory's default (read from the environment) or an option of the CLI alone
        value = param.process_value(ctx, param.get_default(ctx))
        if value is None:
            continue  # not given: serve parses it (a comma list) or leaves ServerConfig's value
        assert value == field.default, param.name
        checked.append(param.name)
    assert {"max_sessions", "max_parked_bytes", "world_realtime_headroom", "max_unsent_bytes"} <= set(checked)


def test_serve_picks_the_voice_activity_detector() -> None:
    help_text = CliRunner().invoke(main, ["serve", "--help"]).output
    assert "--vad [onnx|ggml]" in help_text and "[default: onnx]" in " ".join(help_text.split())
    result = CliRunner().invoke(main, ["serve", "--vad", "webrtc"])
    assert result.exit_code == 2 and "'webrtc' is not one of 'onnx', 'ggml'" in result.output


def test_serve_rejects_unknown_model() -> None:
    result = CliRunner().invoke(main, ["serve", "--world-model", "no-such-model"])
    assert result.exit_code == 2
    assert "unknown model 'no-such-model'" in result.output


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_process_answers_health_and_enforces_key() -> None:
    port = _free_port()
    env = {**os.environ, "LIVEGEN_API_KEY": "from-env"}
    process = subprocess.Popen(
        [sys.executable, "-m", "livegen", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base}/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
            assert time.monotonic() < deadline, "server did not become ready"
            time.sleep(0.2)
        assert httpx.get(f"{base}/v1/models").status_code == 401
        listed = httpx.get(f"{base}/v1/models", headers={"Authorization": "Bearer from-env"})
        assert listed.status_code == 200
        assert listed.json()["object"] == "list"
    finally:
        process.terminate()
        output = process.communicate(timeout=30)[0].decode()
    assert "level=info" in output and "logger=" in output
