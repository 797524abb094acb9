"""The conformance suite's recorder and shared servers.

Recorder contract (docs/compatibility.md is generated from it): every test
marked ``@pytest.mark.conformance(client="pipecat 1.14.0", capability="spoken-turn")``
has its outcome (pass, fail, skip; ``na="reason"`` on the marker turns a pass
into "n/a" with that reason, for a test that proves a client has no API for
the capability) written to ``out/conformance.json`` at the end of the run
(``LIVEGEN_CONFORMANCE_JSON`` overrides the path). ``python -m
tests.conformance.matrix`` renders that file.

Servers: one plain and one TLS server for the whole run, both serving the
embedded voice model from one registry, so the cascade loads once.
"""

from __future__ import annotations

import datetime
import gc
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.certs import Certificates, make_certificates
from livegen.models import Registry, default_registry
from livegen.server import ServerConfig
from livegen.server.thread import ServerThread
from models.cascade.support import ChatServer, serve_chat

#: The key every client is given, as its users give theirs.
API_KEY = "sk-livegen-conformance"

_RESULTS = pytest.StashKey[dict[str, dict[str, Any]]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_RESULTS] = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    results = item.config.stash[_RESULTS]
    # The call's outcome, or a failed or skipped setup or teardown (which overrides it).
    if report.when == "call" or report.failed or report.skipped:
        for marker in item.iter_markers("conformance"):  # a test may prove several cells
            outcome, reason = _outcome(report, marker)
            capability = marker.kwargs["capability"]
            results[f"{item.nodeid} {capability}"] = {
                "client": marker.kwargs["client"],
                "capability": capability,
                "test": item.nodeid,
                "outcome": outcome,
                "reason": reason,
            }
    return report


def _outcome(report: pytest.TestReport, marker: pytest.Mark) -> tuple[str, str]:
    if report.skipped:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        return "skip", reason.removeprefix("Skipped: ")
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash is not None else str(report.longrepr)
        return "fail", " ".join(message.split())[:300]
    if "na" in marker.kwargs:
        return "n/a", str(marker.kwargs["na"])
    return "pass", ""


def pytest_sessionfinish(session: pytest.Session) -> None:
    results = session.config.stash.get(_RESULTS, {})
    if not results:
        return
    default = session.config.rootpath / "out" / "conformance.json"
    path = Path(os.environ.get("LIVEGEN_CONFORMANCE_JSON") or default)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": shlex.join(["pytest", *sys.argv[1:]]),
        "livegen": _commit(session.config.rootpath),
        "results": [results[key] for key in sorted(results)],
    }
    path.write_text(json.dumps(data, indent=1) + "\n")


def _commit(root: Path) -> str:
    """The commit under test, marked ``+changes`` when the tree differs from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        )
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True)
    except OSError:
        return "unknown"
    return (
        head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")
        if head.returncode == 0
        else "unknown"
    )


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="session")
def voice_registry() -> Registry:
    """One registry for every server of the run: the cascade loads once and is shared."""
    return default_registry()


def _serve(registry: Registry, **config: Any) -> ServerThread:
    return ServerThread(ServerConfig(api_key=API_KEY, world_model="none", **config), registry).start()


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    """The scripted chat endpoint (a language model's double) a test's server is pointed at."""
    with serve_chat() as server:
        yield server


@pytest.fixture
def llm_server(voice_registry: Registry, chat: ChatServer) -> Iterator[ServerThread]:
    """``livegen serve --llm-base-url`` at ``chat``."""
    server = _serve(voice_registry, llm_base_url=chat.url, llm_model="tiny")
    try:
        server.wait_ready(timeout=300)
        yield server
    finally:
        server.stop()
        voice_registry.load("cascade").use_llm(None, None)  # the cascade is shared by the run's servers


@pytest.fixture(scope="session")
def plain_server(voice_registry: Registry) -> Iterator[ServerThread]:
    """``livegen serve`` with its default voice model, on ws:// and http://."""
    server = _serve(voice_registry)
    try:
        server.wait_ready(timeout=300)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def tls_server(voice_registry: Registry, certificates: Certificates) -> Iterator[ServerThread]:
    """The same, serving TLS with a certificate signed by the test CA: wss:// and https://."""
    server = _serve(
        voice_registry, ssl_certfile=str(certificates.cert_file), ssl_keyfile=str(certificates.key_file)
    )
    try:
        server.wait_ready(timeout=300, verify=certificates.client_context())
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def speech(voice_registry: Registry, plain_server: ServerThread) -> Callable[..., bytes]:
    """``speech("What time is it?")``: the words in a user's voice, 24 kHz PCM16 as the wire carries it.

    Spoken by espeak-ng through the served model's own speech worker, in a
    voice unlike the assistant's (see tests/models/cascade/support.py).
    """
    from models.cascade.support import wire_audio

    cascade = voice_registry.load("cascade")
    made: dict[tuple[str, float], bytes] = {}

    def say(text: str, lead_s: float = 0.3) -> bytes:
        if (text, lead_s) not in made:
            made[text, lead_s] = wire_audio(cascade, text, lead_s=lead_s)
        return made[text, lead_s]

    return say


@pytest.fixture(autouse=True)
def _collect_garbage() -> Iterator[None]:
    """Collect garbage after each test: a client's leaked socket fails its own test, not a later one."""
    yield
    gc.collect()
