"""HTTP heads and bodies as an attacker sends them, against a real server over raw sockets (issue 30).

Every refusal is checked on the wire: its status, and its JSON body in OpenAI's
error shape. The limits are set small where a test would otherwise send
megabytes; the defaults are the same code.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from livegen.client.webrtc import Caller, mint
from livegen.server.http import client_secrets
from livegen.server.thread import ServerThread
from voice.scripted import registry

StartServer = Callable[..., ServerThread]
VOICE = {"voice_model": "scripted-voice", "world_model": "none"}


def voice(start_server: StartServer, **config: Any) -> ServerThread:
    server = start_server(registry=registry(), **VOICE, **config)
    server.wait_ready(timeout=30)
    return server


#: Every raw socket a test opened; closed after it.
OPENED: list[socket.socket] = []


@pytest.fixture(autouse=True)
def close_sockets() -> Iterator[None]:
    yield
    while OPENED:
        OPENED.pop().close()


def connect(server: ServerThread) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    OPENED.append(sock)
    return sock


def answer(sock: socket.socket, within: float = 10.0) -> tuple[int | None, dict[str, Any] | None]:
    """The status and JSON body the server sends before it closes (None, None: closed without one)."""
    sock.settimeout(within)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    if not data:
        return None, None
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body) if body.startswith(b"{") else None


def error_of(body: dict[str, Any] | None) -> dict[str, Any]:
    assert body is not None and {"message", "type", "code", "param"} <= set(body["error"]), body
    return body["error"]


# --- bodies ------------------------------------------------------------------------------------


def test_a_body_over_the_limit_is_refused_413_on_every_route(start_server: StartServer) -> None:
    server = voice(start_server)  # the default limit: 1 MiB
    big = b"v=0\r\n" + b"a=x\r\n" * 400_000  # 2.4 MB
    for path in ("/v1/realtime/calls", "/v1/realtime/client_secrets", "/v1/realtime/sessions"):
        refused = httpx.post(f"{server.http_url}{path}", content=big, timeout=10)
        assert refused.status_code == 413, path
        assert error_of(refused.json())["code"] == "request_too_large"
    # A body without a Content-Length is counted as it is read.
    sock = connect(server)
    chunk = b"a" * 65536
    head = (
        b"POST /v1/realtime/client_secrets HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    sock.sendall(head + (b"%x\r\n%s\r\n" % (len(chunk), chunk)) * 17 + b"0\r\n\r\n")
    status, body = answer(sock)
    assert status == 413 and error_of(body)["code"] == "request_too_large"
    sock.close()
    assert httpx.get(f"{server.http_url}/health").status_code == 200


def test_a_slow_body_is_answered_408(start_server: StartServer) -> None:
    server = voice(start_server, body_timeout_s=1.0)
    sock = connect(server)
    sock.sendall(
        b"POST /v1/realtime/calls HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\nv=0\r\n"
    )
    status, body = answer(sock)  # no more of the body is ever sent
    assert status == 408 and error_of(body)["code"] == "request_timeout"


async def test_slow_offers_hold_no_call_slot(start_server: StartServer) -> None:
    server = voice(start_server, webrtc_max_calls=1)
    for _ in range(2):  # more trickling offers than there are call slots
        sock = connect(server)
        sock.sendall(
            b"POST /v1/realtime/calls HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5000\r\n\r\nv=0\r\n"
        )
    await asyncio.sleep(0.3)  # the server has read their heads and waits for their bodies
    caller = Caller(server.http_url, None)
    try:
        response = await caller.offer()
        assert response.status_code == 201, response.text
    finally:
        await caller.close()


def test_a_client_leaving_mid_body_logs_no_traceback(
    start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    server = voice(start_server)
    caplog.set_level(logging.INFO)
    for path in ("/v1/realtime/calls", "/v1/realtime/client_secrets"):
        sock = connect(server)
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{{".encode())
        time.sleep(0.2)
        sock.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # until both are seen to end, one way or the other
        ended = [
            r for r in caplog.records if r.getMessage() == "http.client_left" or r.levelno >= logging.ERROR
        ]
        if len(ended) >= 2:
            break
        time.sleep(0.05)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert httpx.get(f"{server.http_url}/health").status_code == 200


def test_garbage_after_a_404_or_405_is_refused_without_a_traceback(
    start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Found by a fuzz (issue 37, item 11): the 400 for the garbage half-closed the connection, then
    # the answer to the request before it wrote after write_eof() and uvicorn logged a traceback.
    server = voice(start_server)
    caplog.set_level(logging.INFO)
    for head in ("GET /nope HTTP/1.1", "DELETE /health HTTP/1.1", "GET /v1/models HTTP/1.1"):
        sock = connect(server)
        sock.sendall(f"{head}\r\nHost: 127.0.0.1\r\n\r\n\x00garbage\r\n\r\n".encode())
        sock.shutdown(socket.SHUT_WR)
        status, body = answer(sock)  # read until the server closes: the first answer ran by then
        assert status == 400 and error_of(body)["code"] == "invalid_value", (head, status, body)
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert len([r for r in caplog.records if r.getMessage() == "http.refused"]) == 3
    assert httpx.get(f"{server.http_url}/health").status_code == 200


# --- parsing -----------------------------------------------------------------------------------


def multipart(parts: list[tuple[str, bytes]], boundary: str = "b0undary") -> tuple[bytes, dict[str, str]]:
    body = b"".join(
        b'--%s\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n'
        % (boundary.encode(), n.encode(), v)
        for n, v in parts
    )
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    return body + b"--%s--\r\n" % boundary.encode(), headers


def test_a_multipart_flood_is_refused_unparsed(start_server: StartServer) -> None:
    server = voice(start_server)
    body, headers = multipart([("sdp", b"nope"), *[("x", b"") for _ in range(10_000)]])
    assert len(body) < 1024 * 1024  # under the body limit: the parser itself must refuse it
    refused = httpx.post(f"{server.http_url}/v1/realtime/calls", content=body, headers=headers, timeout=30)
    assert refused.status_code == 400
    error = error_of(refused.json())
    assert error["code"] == "invalid_value" and "more than 8 parts" in error["message"]
    # A few parts still parse: the offer is read and judged (no audio), the session decoded.
    body, headers = multipart([("sdp", b"v=0\r\n"), ("session", b'{"type": "realtime"}')])
    judged = httpx.post(f"{server.http_url}/v1/realtime/calls", content=body, headers=headers)
    assert judged.status_code == 400 and "no audio" in error_of(judged.json())["message"]


def test_deep_json_is_invalid_json_not_a_500(start_server: StartServer) -> None:
    server = voice(start_server)
    deep = b'{"a":' * 5000 + b"1" + b"}" * 5000
    url = f"{server.http_url}/v1/realtime"
    for path in ("/client_secrets", "/sessions"):
        refused = httpx.post(f"{url}{path}", content=deep)
        assert refused.status_code == 400 and error_of(refused.json())["code"] == "invalid_json"
    body, headers = multipart([("sdp", b"v=0\r\n"), ("session", deep)])
    refused = httpx.post(f"{url}/calls", content=body, headers=headers)
    assert refused.status_code == 400
    error = error_of(refused.json())
    assert error["code"] == "invalid_json" and error["param"] == "session"


# --- heads -------------------------------------------------------------------------------------


def test_a_head_over_the_limit_is_refused_431_complete_or_not(start_server: StartServer) -> None:
    server = start_server(world_model="none", voice_model="none")
    sock = connect(server)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 64 * 1024 + b"\r\n\r\n")
    status, body = answer(sock)
    assert status == 431 and error_of(body)["code"] == "request_header_fields_too_large"
    sock = connect(server)  # a head that never ends is refused as soon as it is too large
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 1024 * 1024)
    status, body = answer(sock)
    assert status == 431 and error_of(body)["code"] == "request_header_fields_too_large"
    assert httpx.get(f"{server.http_url}/health", headers={"X-Fine": "a" * 8000}).status_code == 200


def test_slow_and_silent_connections_are_closed(start_server: StartServer) -> None:
    server = start_server(world_model="none", voice_model="none", header_timeout_s=1.0)
    silent = connect(server)
    slow = connect(server)
    slow.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    slow.settimeout(0.2)
    status: int | None = None
    for _ in range(50):  # slowloris: a header line now and then, never the end of the head
        try:
            data = slow.recv(65536)
        except TimeoutError:
            slow.sendall(b"X-A: b\r\n")
            continue
        status = int(data.split(b" ", 2)[1]) if data else 0
        break
    assert status == 408
    assert answer(silent) == (None, None)  # closed without a word


def test_http_connections_count_under_max_connections(start_server: StartServer) -> None:
    server = voice(start_server, max_connections=3, header_timeout_s=0)  # no head deadline: only the cap
    silent = [connect(server) for _ in range(3)]
    time.sleep(0.3)
    # One more: the connection that has waited longest for a head makes room, and the new one is served.
    assert httpx.get(f"{server.http_url}/health").status_code == 200
    assert answer(silent[0]) == (None, None)
    # Connections mid-request cannot be closed without loss: past the cap, one more is refused.
    for _ in range(3):
        busy = connect(server)
        busy.sendall(
            b"POST /v1/realtime/client_secrets HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99\r\n\r\n"
        )
    time.sleep(0.3)
    refused = httpx.get(f"{server.http_url}/health")
    assert refused.status_code == 503 and error_of(refused.json())["code"] == "too_many_connections"


# --- keys --------------------------------------------------------------------------------------


def test_a_mint_flood_is_refused_and_never_revokes_a_live_key(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_secrets, "MAX_KEYS", 3)
    server = voice(start_server)
    first = mint(server.http_url)["value"]
    mint(server.http_url), mint(server.http_url)
    refused = httpx.post(f"{server.http_url}/v1/realtime/client_secrets", json={})
    assert refused.status_code == 429 and error_of(refused.json())["code"] == "rate_limit_exceeded"
    # The first key still opens calls: this offer is judged (400), not its key (401).
    offer = httpx.post(f"{server.http_url}/v1/realtime/calls", content="nope", headers=bearer(first))
    assert offer.status_code == 400 and error_of(offer.json())["code"] == "invalid_offer"


def test_keys_hold_a_bounded_number_of_bytes(start_server: StartServer) -> None:
    server = voice(start_server, max_client_secret_bytes=4096)
    session = {"type": "realtime", "instructions": "x" * 3000}
    mint(server.http_url, session=session)
    refused = httpx.post(f"{server.http_url}/v1/realtime/client_secrets", json={"session": session})
    assert refused.status_code == 429 and error_of(refused.json())["code"] == "rate_limit_exceeded"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_a_server_key_that_starts_with_ek_is_the_server_key(start_server: StartServer) -> None:
    server = voice(start_server, api_key="ek_the_server_key")
    offer = httpx.post(
        f"{server.http_url}/v1/realtime/calls", content="nope", headers=bearer("ek_the_server_key")
    )
    assert offer.status_code == 400 and error_of(offer.json())["code"] == "invalid_offer"
    unknown = httpx.post(f"{server.http_url}/v1/realtime/calls", content="nope", headers=bearer("ek_other"))
    assert unknown.status_code == 401


def test_multipart_fields_take_what_browsers_and_sdks_send() -> None:
    from livegen.server.http.bodies import multipart_fields

    body = (
        b"preamble\r\n--x y\r\n"
        b'Content-Disposition: form-data; name="sdp"; filename="offer.sdp"\r\n'
        b"Content-Type: application/sdp\r\n\r\nv=0\r\n\r\n"
        b"--x y\r\nContent-Disposition: form-data; name=session\r\n\r\n{}\r\n--x y--\r\n"
    )
    fields = multipart_fields(body, 'multipart/form-data; boundary="x y"')
    assert fields == {"sdp": b"v=0\r\n", "session": b"{}"}
