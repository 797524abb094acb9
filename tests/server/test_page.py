"""The page's files over HTTP: served at / and /static/, open without the API key."""

from __future__ import annotations

import httpx
import pytest

from livegen.server.page import STATIC_DIR
from sharing import Servers

MODULES = [
    "app.js",
    "connection.js",
    "voice.js",
    "world.js",
    "world-call.js",
    "call-link.js",
    "call-memory.js",
    "voice-conversation.js",
    "webrtc.js",
    "world-tracks.js",
    "world-input.js",
    "world-readouts.js",
    "world-players.js",
    "audio-worklet.js",
]


def test_index_is_html_with_every_test_id(shared_servers: Servers) -> None:
    running = shared_servers.get()  # these tests only read the server
    response = httpx.get(f"{running.http_url}/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["cache-control"] == "no-cache"
    for test_id in (
        "voice-start",
        "voice-stop",
        "world-start",
        "world-canvas",
        "world-prompt",
        "world-reset",
        "world-invite",
        "world-invite-link",
        "status",
    ):
        assert f'data-testid="{test_id}"' in response.text
    # The transcript bubbles are made by voice-conversation.js, one per turn.
    assert '"voice-user-transcript"' in (STATIC_DIR / "voice-conversation.js").read_text()
    assert '"voice-assistant-transcript"' in (STATIC_DIR / "voice-conversation.js").read_text()


@pytest.mark.parametrize("name", [*MODULES, "style.css"])
def test_static_files_are_served_with_a_browser_type(shared_servers: Servers, name: str) -> None:
    running = shared_servers.get()
    response = httpx.get(f"{running.http_url}/static/{name}")
    assert response.status_code == 200
    expected = "text/css" if name.endswith(".css") else "javascript"
    assert expected in response.headers["content-type"]
    assert response.content == (STATIC_DIR / name).read_bytes()


def test_page_is_open_but_the_api_is_not(shared_servers: Servers) -> None:
    running = shared_servers.get(api_key="sekrit")
    assert httpx.get(f"{running.http_url}/").status_code == 200
    assert httpx.get(f"{running.http_url}/static/app.js").status_code == 200
    assert httpx.get(f"{running.http_url}/v1/models").status_code == 401
    # Nothing outside the static folder is reachable through it.
    assert httpx.get(f"{running.http_url}/static/../v1/models").status_code in (401, 404)
    assert httpx.get(f"{running.http_url}/static/nope.js").status_code == 404


def test_static_files_ship_as_package_data() -> None:
    from importlib.resources import files

    shipped = files("livegen.server").joinpath("static")
    for name in ["index.html", "style.css", *MODULES]:
        assert shipped.joinpath(name).is_file(), name
