"""The HTTP surface of a real server: health, model list, metrics, API keys."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
import websockets
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

from livegen.models import Kind, ModelInfo, Registry
from livegen.server.http.auth import APIKeyMiddleware, select_subprotocol
from livegen.server.thread import ServerThread


def fake_model_loader() -> object:
    return object()


FAKE_WORLD = ModelInfo("fake-world", Kind.WORLD, f"{__name__}:fake_model_loader", "a test entry")
NEEDS_MISSING = ModelInfo(
    "needs-missing", Kind.VOICE, f"{__name__}:fake_model_loader", "x", requires=("no_such_module_xyz",)
)


def test_health_is_200_when_ready(server: ServerThread) -> None:
    response = httpx.get(f"{server.http_url}/health")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"


def test_models_lists_registry_in_openai_shape(start_server: Callable[..., ServerThread]) -> None:
    running = start_server(registry=Registry([FAKE_WORLD, NEEDS_MISSING]))
    body = httpx.get(f"{running.http_url}/v1/models").json()
    assert body["object"] == "list"
    by_id = {m["id"]: m for m in body["data"]}
    assert by_id["fake-world"]["kind"] == "world"
    assert by_id["fake-world"]["object"] == "model"
    assert by_id["needs-missing"]["available"] is False


def test_metrics_are_prometheus_text(server: ServerThread) -> None:
    response = httpx.get(f"{server.http_url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert 'livegen_sessions_open{kind="voice"} 0.0' in response.text


@pytest.mark.parametrize("path", ["/v1/models", "/metrics"])
def test_api_key_guards_every_route_but_health(start_server: Callable[..., ServerThread], path: str) -> None:
    running = start_server(api_key="sekrit")
    assert httpx.get(f"{running.http_url}{path}").status_code == 401
    wrong = httpx.get(f"{running.http_url}{path}", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert wrong.json()["error"]["code"] == "invalid_api_key"
    right = httpx.get(f"{running.http_url}{path}", headers={"Authorization": "Bearer sekrit"})
    assert right.status_code == 200
    running.wait_ready()  # the default voice model loads in the background; /health needs no key
    assert httpx.get(f"{running.http_url}/health").status_code == 200


def test_unknown_route_is_404(server: ServerThread) -> None:
    assert httpx.get(f"{server.http_url}/nope").status_code == 404


# The WebSocket half of the middleware, on a minimal echo app: the real
# endpoints come with their services and are tested with them.
async def _echo(websocket: WebSocket) -> None:
    await websocket.accept(subprotocol=select_subprotocol(websocket.scope))
    await websocket.send_text(await websocket.receive_text())
    await websocket.close()


@pytest.fixture
def echo_url() -> object:
    import socket
    import threading
    import time

    import uvicorn

    app = APIKeyMiddleware(Starlette(routes=[WebSocketRoute("/ws", _echo)]), api_key="k3y")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield f"ws://127.0.0.1:{sock.getsockname()[1]}/ws"
    server.should_exit = True
    thread.join()


async def test_websocket_without_key_is_refused_with_401(echo_url: str) -> None:
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(echo_url):
            pass
    assert refused.value.response.status_code == 401


async def test_websocket_key_by_header(echo_url: str) -> None:
    async with websockets.connect(echo_url, additional_headers={"Authorization": "Bearer k3y"}) as ws:
        await ws.send("hi")
        assert await ws.recv() == "hi"


async def test_websocket_key_by_browser_subprotocol(echo_url: str) -> None:
    protocols = ["realtime", "openai-insecure-api-key.k3y"]
    async with websockets.connect(echo_url, subprotocols=protocols) as ws:  # type: ignore[arg-type]
        assert ws.subprotocol == "realtime"
        await ws.send("hi")
        assert await ws.recv() == "hi"


async def test_websocket_wrong_key_by_subprotocol_is_refused(echo_url: str) -> None:
    with pytest.raises(websockets.InvalidStatus):
        async with websockets.connect(echo_url, subprotocols=["openai-insecure-api-key.bad"]):  # type: ignore[list-item]
            pass
