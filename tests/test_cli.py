"""The `livegen` command: help texts and their groups, --config, old flag names, model listing,
and a real `serve` process."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click
import httpx
from click.testing import CliRunner

from livegen.cli import main
from livegen.cli.serve import serve
from livegen.cli.serve_help import ALIASES, GROUPS

#: An option's entry in a help text: its flags start the line, indented two spaces.
FLAG = re.compile(r"^  (?:-\w, )?(--[a-z][\w-]*)", re.MULTILINE)


def _help(*args: str) -> str:
    result = CliRunner().invoke(main, ["serve", *args], terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


def _flags(help_text: str) -> list[str]:
    return FLAG.findall(help_text)


def _params(*args: str) -> dict[str, Any]:
    """What ``livegen serve ARGS`` would serve with: the parsed options, nothing started."""
    with serve.make_context("serve", list(args)) as ctx:
        return dict(ctx.params)


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


def test_serve_help_shows_at_most_25_options_and_names_the_groups() -> None:
    help_text = _help("--help")
    assert len(_flags(help_text)) <= 25
    assert "--host" in help_text and "--config" in help_text and "--world-dtype" not in help_text
    for group in GROUPS:
        assert re.search(rf"^  {group}\b", help_text, re.MULTILINE), group


def test_every_option_is_in_exactly_one_help_group() -> None:
    shown = _flags(_help("--help"))
    for group in GROUPS:
        shown += _flags(_help("--help", group))
    every = [param.opts[0] for param in serve.params] + ["--help"]
    assert sorted(shown) == sorted(every)
    assert sorted(_flags(_help("--help", "all"))) == sorted(every)


def test_help_world_shows_the_world_group_alone() -> None:
    help_text = _help("--help", "world")
    assert "world sessions" in help_text
    assert {"--world-dtype", "--world-max-spectators", "--world-frames-per-chunk"} <= set(_flags(help_text))
    assert "--host" not in help_text and "--asr-model" not in help_text
    assert _help("--help=world") == help_text


def test_an_unknown_help_group_is_refused_with_the_groups() -> None:
    result = CliRunner().invoke(main, ["serve", "--help", "nope"])
    assert result.exit_code == 2
    assert "no option group 'nope'" in result.output and "world" in result.output


def test_config_sets_options_and_a_flag_overrides_it(tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text('port = 9001\nworld-workers = 2\nmax_parked_mib = 3\nserved-model-name = ["a", "b"]\n')
    given = _params("--config", str(config))
    assert (given["port"], given["world_workers"], given["served_model_names"]) == (9001, 2, ("a", "b"))
    assert given["max_parked_bytes"] == 3 * 1024 * 1024  # the file's value goes through the option
    assert _params("--port", "9002", "--config", str(config))["port"] == 9002
    assert _params()["port"] == 8000


def test_an_unknown_config_key_fails_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text("port = 9001\nworld-wrokers = 2\n")
    result = CliRunner().invoke(main, ["serve", "--config", str(config)])
    assert result.exit_code == 2
    assert "unknown key 'world-wrokers'" in result.output and "serve.toml" in result.output


def test_a_bad_config_value_names_its_option(tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text('port = "many"\n')
    result = CliRunner().invoke(main, ["serve", "--config", str(config)])
    assert result.exit_code == 2 and "'--port'" in result.output


def test_every_option_is_in_the_configuration_docs() -> None:
    """docs/configuration.md's table is where an option's meaning is written out at length."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    missing = [opt for param in serve.params for opt in param.opts[:1] if f"`{opt}`" not in doc]
    assert not missing, f"not in docs/configuration.md: {missing}"


def test_the_old_duplex_flags_still_work_hidden() -> None:
    assert _params("--duplex-yield-ms", "500")["duplex_yield_ms"] == 500
    assert _params("--duplex-realtime-headroom=0.5")["duplex_realtime_headroom"] == 0.5
    assert _params("--lockstep-yield-ms", "400")["duplex_yield_ms"] == 400
    every = _help("--help", "all")
    assert "--lockstep-yield-ms" in every and "duplex" not in every.replace("full-duplex", "")
    assert set(ALIASES.values()) <= set(_flags(every))


def test_the_old_bench_name_still_runs_hidden() -> None:
    listed = CliRunner().invoke(main, ["bench", "--help"]).output
    assert "voice-lockstep" in listed and "voice-duplex" not in listed
    old = CliRunner().invoke(main, ["bench", "voice-duplex", "--help"])
    assert old.exit_code == 0 and "--sizes" in old.output


def test_serve_picks_the_voice_activity_detector() -> None:
    help_text = _help("--help", "cascade")
    assert "--vad [onnx|ggml]" in help_text and "[default: onnx]" in " ".join(help_text.split())
    result = CliRunner().invoke(main, ["serve", "--vad", "webrtc"])
    assert result.exit_code == 2 and "'webrtc' is not one of 'onnx', 'ggml'" in result.output


def test_serve_help_names_whisper_base_the_default_recogniser() -> None:
    help_text = " ".join(_help("--help", "cascade").split())
    assert "--asr-model TEXT" in help_text and "else whisper-base]" in help_text


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
