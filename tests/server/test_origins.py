"""The Origin and Host checks over the wire: cross-origin WebSockets and DNS rebinding refused.

The policy's rules are unit-tested on ``OriginPolicy``; the wire tests run the
real server with real clients (httpx, websockets) and forged headers, as a
hostile page's browser would send them.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest
import websockets
from websockets.exceptions import InvalidStatus

from livegen.server.http.origins import OriginPolicy, host_name, parse_list
from livegen.server.thread import ServerThread

StartServer = Callable[..., ServerThread]


def test_host_names_lose_their_port() -> None:
    assert host_name("127.0.0.1:8000") == "127.0.0.1"
    assert host_name("[::1]:8000") == "::1"
    assert host_name("Example.COM") == "example.com"
    assert host_name("::1") == "::1"
    assert parse_list(" a, ,b ") == ("a", "b") and parse_list("") is None


def test_default_policy_without_a_key() -> None:
    policy = OriginPolicy.build("127.0.0.1", None, None, None)
    assert policy.is_host_allowed("127.0.0.1:8000") and policy.is_host_allowed("localhost:8000")
    assert policy.is_host_allowed("[::1]:8000") and policy.is_host_allowed("10.0.0.5")
    assert not policy.is_host_allowed("attacker.example:8000") and not policy.is_host_allowed(None)
    assert policy.is_origin_allowed(None, "127.0.0.1:8000")  # not a browser
    assert policy.is_origin_allowed("http://127.0.0.1:8000", "127.0.0.1:8000")  # own page
    assert policy.is_origin_allowed("http://localhost:5173", "127.0.0.1:8000")  # a local page
    assert not policy.is_origin_allowed("https://attacker.example", "127.0.0.1:8000")
    assert not policy.is_origin_allowed("null", "127.0.0.1:8000")


def test_a_key_allows_any_origin_and_explicit_lists_are_exact() -> None:
    assert OriginPolicy.build("127.0.0.1", "k", None, None).is_origin_allowed("https://a.example", "x")
    policy = OriginPolicy.build("0.0.0.0", None, ["app.example"], ["https://app.example"])
    assert policy.is_host_allowed("app.example:443") and not policy.is_host_allowed("127.0.0.1")
    assert policy.is_origin_allowed("https://app.example/", "app.example")
    assert not policy.is_origin_allowed("http://localhost:3000", "app.example")
    assert OriginPolicy.build("0.0.0.0", None, ["*"], ["*"]).is_host_allowed("anything.example")


@pytest.fixture
def open_server(start_server: StartServer) -> ServerThread:
    """No key, loopback: the case a hostile page can reach."""
    server = start_server()
    server.wait_ready()
    return server


@pytest.mark.parametrize("path", ["/v1/realtime", "/v1/worlds"])
async def test_a_cross_origin_websocket_handshake_is_refused(open_server: ServerThread, path: str) -> None:
    with pytest.raises(InvalidStatus) as refused:
        await websockets.connect(open_server.ws_url + path, origin="https://attacker.example")  # type: ignore[arg-type]
    assert refused.value.response.status_code == 403
    assert json.loads(refused.value.response.body)["error"]["code"] == "origin_not_allowed"


async def test_the_servers_own_page_and_non_browser_clients_may_connect(open_server: ServerThread) -> None:
    own = f"http://127.0.0.1:{open_server.port}"
    async with websockets.connect(open_server.ws_url + "/v1/realtime", origin=own) as ws:  # type: ignore[arg-type]
        assert json.loads(await ws.recv())["type"] == "session.created"
    async with websockets.connect(open_server.ws_url + "/v1/realtime") as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"


@pytest.mark.parametrize("path", ["/v1/models", "/metrics", "/health", "/"])
def test_a_rebinding_host_gets_403(open_server: ServerThread, path: str) -> None:
    response = httpx.get(
        open_server.http_url + path, headers={"Host": f"attacker.example:{open_server.port}"}
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "host_not_allowed"
    assert httpx.get(open_server.http_url + path).status_code == 200


def test_refusals_are_counted_and_logged_once(
    open_server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    headers = {"Origin": "https://attacker.example"}
    with caplog.at_level("WARNING", logger="livegen.server"):
        assert httpx.get(open_server.http_url + "/v1/models", headers=headers).status_code == 403
    lines = [r for r in caplog.records if r.getMessage() == "http.refused"]
    assert len(lines) == 1 and lines[0].exc_info is None
    metrics = httpx.get(open_server.http_url + "/metrics").text
    assert 'livegen_refused_total{code="origin_not_allowed"} 1.0' in metrics


def test_allowed_origins_flag_admits_a_listed_origin(start_server: StartServer) -> None:
    server = start_server(voice_model="none", world_model="none", allowed_origins=("https://app.example",))
    listed = httpx.get(server.http_url + "/v1/models", headers={"Origin": "https://app.example"})
    other = httpx.get(server.http_url + "/v1/models", headers={"Origin": "http://localhost:3000"})
    assert listed.status_code == 200 and other.status_code == 403
