"""The cluster's private per-process ports under fuzzed requests (issue 37: the fuzz suites gain the
cluster's private port).

``livegen serve --workers 2 --host 127.0.0.1`` with an API key, as in ``test_cluster_guards.py``;
each process's private port (``cluster/gate.py``, ``cluster/forward.py``) is sent, over raw
sockets: seeded garbage, HTTP with forged ``x-livegen-relayed`` marks (no secret, a wrong one,
with and without a session id), oversized headers, and requests whose sender half-closes its
socket before or after the request. Each must be answered or closed, never left hanging (a
socket timeout bounds every read), and afterwards both processes answer ``/health`` and the
server tree has logged no traceback.
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cluster_harness as harness
import httpx
import pytest
from cluster_harness import Cluster, free_port, stop, wait_for

pytest.importorskip("ray")

KEY = "fuzz-private-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
#: Seconds a fuzzed socket may go unanswered: a bound against a stall, not a speed figure.
ANSWER_WITHIN_S = 20.0


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Path]]:
    home = tmp_path_factory.mktemp("home")
    log = home / "serve.log"
    port = free_port()
    with log.open("wb") as sink:
        serve = _start(home, port, sink)
        try:
            body = wait_for(port, lambda b: len(b["cluster"]["processes"]) == 2)
            yield Cluster(port, body["cluster"]["group"], serve), log
        finally:
            stop(serve)


def _start(home: Path, port: int, sink: Any) -> subprocess.Popen[bytes]:
    """``cluster_harness.start_serve``'s server, its tree's output in ``sink`` to look for tracebacks."""
    options = {"voice_model": "scripted-voice", "world_model": "procedural-world", "api_key": KEY}
    options.update(workers=2, host="127.0.0.1", port=port)
    command = [sys.executable, str(harness.HERE / "cluster_models.py"), json.dumps(options)]
    env = {**harness.env(), "HOME": str(home)}
    return subprocess.Popen(command, env=env, start_new_session=True, stdout=sink, stderr=subprocess.STDOUT)


def _private_ports(cluster: Cluster) -> list[int]:
    body = httpx.get(f"http://127.0.0.1:{cluster.port}/health", headers=AUTH, timeout=10).json()
    addresses = [p["address"] for p in body["cluster"]["processes"] if p["group"] == cluster.group]
    return [int(address.rsplit(":", 1)[1].split("/")[0]) for address in addresses]


def _exchange(port: int, data: bytes, half_close: bool) -> bytes:
    """Send ``data`` (then half-close if asked) and read until the server closes or stops
    sending; raises ``TimeoutError`` if it neither answers nor closes within the bound."""
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WITHIN_S) as sock:
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            sock.sendall(data)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                answer += chunk
                if not half_close and b"\r\n\r\n" in answer:
                    break  # an answer's head came: the server is not stalled
        return answer


def _request(path: str, headers: dict[str, str], upgrade: bool) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1"]
    if upgrade:
        lines += [
            "Upgrade: websocket",
            "Connection: Upgrade",
            "Sec-WebSocket-Version: 13",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        ]
    lines += [f"{key}: {value}" for key, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _cases(rng: random.Random) -> Iterator[tuple[bytes, bool]]:
    """(bytes to send, whether to half-close after them)."""
    marks = ["1", "", "x" * 64, "forged-secret", "\t1 "]
    paths = ["/v1/realtime?session_id=sess_0123456789abcdef", "/v1/realtime", "/v1/worlds", "/nope"]
    for mark in marks:
        for path in paths:
            headers = {**AUTH, "x-livegen-relayed": mark}
            yield _request(path, headers, upgrade=path != "/nope"), rng.random() < 0.5
    for size in (16 * 1024, 256 * 1024):  # oversized header values and many headers
        yield _request("/health", {"x-livegen-relayed": "1", "x-big": "a" * size}, False), False
        many = {f"x-h{i}": "v" for i in range(size // 64)}
        yield _request("/v1/realtime", {**AUTH, **many}, True), True
    for _ in range(20):  # garbage, and a request cut short then half-closed
        yield rng.randbytes(rng.randint(1, 4096)), rng.random() < 0.5
        whole = _request(rng.choice(paths), {**AUTH, "x-livegen-relayed": "1"}, True)
        yield whole[: rng.randint(1, len(whole) - 1)], True
    yield b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc", True
    yield b"DELETE /health HTTP/1.1\r\nHost: x\r\n\r\n", True  # a 405, then the client half-closed


def test_fuzzed_requests_on_the_private_ports_are_answered_and_log_no_traceback(
    fuzzed: tuple[Cluster, Path],
) -> None:
    cluster, log = fuzzed
    ports = _private_ports(cluster)
    assert len(ports) == 2
    rng = random.Random(37)
    stalled = []
    for data, half_close in _cases(rng):
        for port in ports:
            try:
                _exchange(port, data, half_close)
            except TimeoutError:
                stalled.append((port, data[:80], half_close))
    assert stalled == [], stalled
    for port in ports:  # both processes still serve
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200
    text = log.read_text(errors="replace")
    assert "level=info" in text  # not vacuous: the tree's log is here
    assert "Traceback" not in text and "level=error" not in text, text[-3000:]
