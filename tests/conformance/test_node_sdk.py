"""The ``openai`` Node SDK (6.x, pinned in tests/conformance/node/package-lock.json) over TLS.

The SDK's ``OpenAIRealtimeWS`` always dials ``wss://``: against ``livegen serve
--ssl-certfile/--ssl-keyfile`` with a certificate the test makes, trusted
through ``NODE_EXTRA_CA_CERTS`` as a Node user trusts a private CA. Each test
runs ``node/realtime.mjs`` for one scenario, which prints every server event
the SDK emitted and every error it raised to the app's ``error`` listener.

The SDK is installed by the suite itself, so the README's ``pytest`` passes on
a fresh clone: the first test runs ``npm ci`` in ``node/`` (from the pinned
lock file) when ``node_modules`` lacks it. Without ``node`` and ``npm`` these
tests are skipped with the command that installs them; in CI (``CI=true``)
they fail instead, so the suite cannot go green by not running them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conformance.certs import Certificates
from conformance.conftest import API_KEY
from conformance.support import INTERRUPTION, LONG_QUESTION, QUESTION, TEXT_QUESTION
from livegen.server.thread import ServerThread

NODE_DIR = Path(__file__).parent / "node"
VERSION = json.loads((NODE_DIR / "package.json").read_text())["dependencies"]["openai"]
CLIENT = f"openai-node {VERSION}"


NPM_CI = ["npm", "ci", "--no-audit", "--no-fund", "--silent"]


def _missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI must run the Node SDK's tests)")
    pytest.skip(reason)


@pytest.fixture(scope="module", autouse=True)
def node_sdk() -> None:
    """The pinned SDK in node/node_modules: installed here with `npm ci` if it is not yet."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        _missing("node and npm are needed: `apt-get install nodejs npm`, then rerun")
    if (NODE_DIR / "node_modules" / "openai").is_dir():
        return
    done = subprocess.run(NPM_CI, cwd=NODE_DIR, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        _missing(f"`npm ci` in {NODE_DIR} failed (exit {done.returncode}): {done.stderr[-500:]}")


def run_scenario(
    server: ServerThread, certificates: Certificates, scenario: str, speech: dict[str, bytes], tmp: Path
) -> dict[str, Any]:
    node = shutil.which("node")
    assert node, "node is needed for the Node SDK's conformance (.ci/run installs it)"
    assert (NODE_DIR / "node_modules" / "openai").is_dir(), f"run `npm ci` in {NODE_DIR}"
    files = {}
    for name, pcm in speech.items():
        (tmp / f"{name}.pcm").write_bytes(pcm)
        files[name] = str(tmp / f"{name}.pcm")
    arguments = {
        "baseURL": f"{server.http_url}/v1",
        "apiKey": API_KEY,
        "scenario": scenario,
        "speech": files,
        "text": TEXT_QUESTION,
    }
    env = {**os.environ, "NODE_EXTRA_CA_CERTS": str(certificates.ca_file)}
    done = subprocess.run(
        [node, "realtime.mjs", json.dumps(arguments)],
        cwd=NODE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert done.stdout, f"node printed nothing (exit {done.returncode}): {done.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(done.stdout)
    result["exit"] = done.returncode
    return result


def of(result: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [e for e in result["events"] if e["type"] == kind]


def said(result: dict[str, Any], response_id: str) -> str:
    deltas = of(result, "response.output_audio_transcript.delta")
    return "".join(e["delta"] for e in deltas if e["response_id"] == response_id)


@pytest.mark.conformance(client=CLIENT, capability="tls")
@pytest.mark.conformance(client=CLIENT, capability="spoken-turn")
def test_spoken_turn(
    tls_server: ServerThread, certificates: Certificates, speech: Callable[..., bytes], tmp_path: Path
) -> None:
    result = run_scenario(tls_server, certificates, "spoken-turn", {"question": speech(QUESTION)}, tmp_path)
    assert result["errors"] == [] and result["exit"] == 0
    [done] = of(result, "response.done")
    assert done["response"]["status"] == "completed"
    [transcript] = of(result, "conversation.item.input_audio_transcription.completed")
    assert "12" in transcript["transcript"] and "7" in transcript["transcript"]
    assert "84" in said(result, done["response"]["id"])
    assert sum(e["delta"] for e in of(result, "response.output_audio.delta")) > 48_000


@pytest.mark.conformance(client=CLIENT, capability="barge-in")
def test_barge_in(
    tls_server: ServerThread, certificates: Certificates, speech: Callable[..., bytes], tmp_path: Path
) -> None:
    clips = {"long": speech(LONG_QUESTION), "interruption": speech(INTERRUPTION, lead_s=0.0)}
    result = run_scenario(tls_server, certificates, "barge-in", clips, tmp_path)
    assert result["errors"] == [] and result["exit"] == 0
    cancelled, answered = of(result, "response.done")[:2]
    assert cancelled["response"]["status"] == "cancelled"
    assert cancelled["response"]["status_details"]["reason"] == "turn_detected"
    assert of(result, "conversation.item.truncated")
    assert answered["response"]["status"] == "completed"
    assert re.search(r"\d:\d\d", said(result, answered["response"]["id"]))


@pytest.mark.conformance(client=CLIENT, capability="text-turn")
def test_text_turn(tls_server: ServerThread, certificates: Certificates, tmp_path: Path) -> None:
    result = run_scenario(tls_server, certificates, "text-turn", {}, tmp_path)
    assert result["errors"] == [] and result["exit"] == 0
    [done] = of(result, "response.done")
    assert done["response"]["status"] == "completed"
    assert "4" in said(result, done["response"]["id"])


@pytest.mark.conformance(client=CLIENT, capability="unknown-item")
def test_unknown_item(tls_server: ServerThread, certificates: Certificates, tmp_path: Path) -> None:
    result = run_scenario(tls_server, certificates, "unknown-item", {}, tmp_path)
    assert result["exit"] == 0 and of(result, "session.updated")  # the session goes on
    # The SDK raises each error event to the app's `error` listener: OpenAI's codes, which apps match.
    found = {e["error"]["event_id"]: e["error"]["code"] for e in result["errors"]}
    assert found == {
        "evt_retrieve": "item_retrieve_invalid_item_id",
        "evt_delete": "item_delete_invalid_item_id",
    }


@pytest.mark.conformance(client=CLIENT, capability="idle-cancel")
def test_idle_cancel(tls_server: ServerThread, certificates: Certificates, tmp_path: Path) -> None:
    result = run_scenario(tls_server, certificates, "idle-cancel", {}, tmp_path)
    assert result["exit"] == 0
    [error] = [e["error"] for e in result["errors"]]
    assert (error["code"], error["event_id"]) == ("response_cancel_not_active", "evt_cancel")
    assert error["message"] == "Cancellation failed: no active response found"
