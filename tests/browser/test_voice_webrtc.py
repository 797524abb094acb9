"""The voice panel over WebRTC in headless Chromium, with an ephemeral key from the operator's backend.

The server has an API key; the page is opened with ``?token_endpoint=`` pointing
at a small backend (this test's, real HTTP) that mints ephemeral keys with the
server's key, as an operator's would. Chromium's fake microphone asks a question
(espeak-ng); the page must call over WebRTC (not the WebSocket), show both
transcripts, play the answer from the call's track, and never hold or send the
server's key: every request the page makes is recorded from inside it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from page_browser import Browser, require_browser
from speech import write_question, write_speech

from livegen.server import ServerConfig
from livegen.server.thread import ServerThread

pytestmark = pytest.mark.slow  # loads the real voice models

KEY = "operator-secret-key"

# Recorded in the page before its own scripts run: every fetch and WebSocket, with headers.
RECORDER = """
window.__sent = [];
const realFetch = window.fetch;
window.fetch = function (input, init) {
  window.__sent.push({ url: String(input && input.url || input), init: JSON.stringify(init || {}) });
  return realFetch.apply(this, arguments);
};
const RealSocket = window.WebSocket;
window.WebSocket = function (url, protocols) {
  window.__sent.push({ url: String(url), init: JSON.stringify(protocols || []) });
  return new RealSocket(url, protocols);
};
Object.assign(window.WebSocket, RealSocket);
window.WebSocket.prototype = RealSocket.prototype;
"""


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    require_browser()
    running = ServerThread(ServerConfig(api_key=KEY, world_model="none")).start()
    try:
        running.wait_ready(timeout=180)
        yield running
    finally:
        running.stop()


@pytest.fixture
def token_endpoint(server: ServerThread) -> Iterator[str]:
    """The operator's backend: mints an ephemeral key with the server's key for each POST."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            minted = httpx.post(
                f"{server.http_url}/v1/realtime/client_secrets",
                json={"session": {"type": "realtime"}},
                headers={"Authorization": f"Bearer {KEY}"},
            )
            body = json.dumps(minted.json()).encode()
            self.send_response(minted.status_code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Access-Control-Allow-Origin", "*")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    backend = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=backend.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{backend.server_address[1]}/token"
    finally:
        backend.shutdown()
        backend.server_close()


def texts(browser: Browser, test_id: str) -> list[str]:
    return [element.text for element in browser.find_all(test_id)]


def voice_stats(browser: Browser) -> dict:
    return dict(browser.js("return window.livegen.voice"))


def test_the_page_talks_over_webrtc_with_an_ephemeral_key(
    server: ServerThread, token_endpoint: str, open_browser: Callable[..., Browser], tmp_path: Path
) -> None:
    question = write_question(tmp_path / "question.wav", "what time is it")
    browser = open_browser(fake_audio=question)
    browser.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORDER})
    browser.open(f"{server.http_url}/?token_endpoint={token_endpoint}")
    browser.wait_for(lambda: "Ready" in browser.text("status"), what="the ready status")
    browser.find("voice-start").click()
    browser.wait_for(lambda: voice_stats(browser)["state"] == "live", timeout=30, what="the call")
    assert voice_stats(browser)["transport"] == "webrtc", voice_stats(browser)["fallback"]
    assert "WebRTC" in browser.text("status")

    browser.wait_for(
        lambda: any("time" in text.lower() for text in texts(browser, "voice-user-transcript")),
        timeout=60,
        what="the question's transcript",
    )
    browser.wait_for(
        lambda: any(text.strip() for text in texts(browser, "voice-assistant-transcript")),
        timeout=60,
        what="the answer's transcript",
    )
    browser.wait_for(
        lambda: "output_audio_buffer.stopped" in {e["type"] for e in voice_stats(browser)["trackEvents"]},
        timeout=60,
        what="the answer's track to play out",
    )
    stats = voice_stats(browser)
    browser.screenshot("voice-webrtc-answered")
    assert stats["trackAudibleMs"] >= 500, stats  # the answer played from the call's track
    assert stats["audioDeltas"] == 0  # none came as events: the track carried it
    assert stats["errors"] == []
    assert stats["turnLatenciesMs"]

    # The server's key is nowhere in the page, and no request carried it; the call carried an ek_ key.
    sent = browser.js("return window.__sent")
    state = browser.js(
        "return JSON.stringify([window.livegen, {...sessionStorage}, {...localStorage}])"
        " + document.documentElement.outerHTML"
    )
    assert KEY not in state
    assert not [request for request in sent if KEY in json.dumps(request)]
    calls = [r for r in sent if r["url"].endswith("/v1/realtime/calls")]
    assert calls and "Bearer ek_" in calls[0]["init"]
    assert not [r for r in sent if r["url"].startswith("ws")]  # no WebSocket: the call is WebRTC

    browser.find("voice-stop").click()
    browser.wait_for(lambda: voice_stats(browser)["state"] == "off", what="the call to end")


def test_talking_over_an_answer_clears_the_calls_track(
    server: ServerThread, token_endpoint: str, open_browser: Callable[..., Browser], tmp_path: Path
) -> None:
    # A long answer (the help text, ~7 s), talked over 4 s after the question ends: late enough that
    # the answer is playing even when a busy machine takes 3 s to start it (the fake microphone plays
    # once, so a talk-over that comes before the answer merely starts a second question).
    speech = write_speech(tmp_path / "barge-in.wav", [(1.0, "what can you do"), (4.0, "what time is it")])
    browser = open_browser(fake_audio=speech)
    browser.open(f"{server.http_url}/?token_endpoint={token_endpoint}")
    browser.wait_for(lambda: "Ready" in browser.text("status"), what="the ready status")
    browser.find("voice-start").click()
    browser.wait_for(
        lambda: "output_audio_buffer.cleared" in {e["type"] for e in voice_stats(browser)["trackEvents"]},
        timeout=60,
        what="the server clearing the talked-over answer",
        explain=lambda: voice_stats(browser),
    )
    browser.wait_for(
        lambda: sum(r["status"] == "completed" for r in voice_stats(browser)["responses"].values()) >= 1,
        timeout=60,
        what="the second question's answer",
    )
    stats = voice_stats(browser)
    assert stats["transport"] == "webrtc"
    statuses = [r["status"] for r in stats["responses"].values()]
    assert statuses.count("cancelled") == 1 and "completed" in statuses, statuses
    interrupted = [b for b in browser.find_all("voice-assistant-transcript") if "interrupted" in b.text]
    assert interrupted, "the talked-over answer is not marked interrupted"
    assert stats["errors"] == []
    browser.find("voice-stop").click()


def test_the_page_falls_back_to_the_websocket_and_says_so(
    open_browser: Callable[..., Browser], tmp_path: Path
) -> None:
    question = write_question(tmp_path / "question.wav", "what time is it")
    # A server that takes no WebRTC calls: every offer is refused, as where WebRTC cannot work.
    with ServerThread(ServerConfig(api_key=None, world_model="none", webrtc_max_calls=0)) as server:
        server.wait_ready(timeout=180)
        browser = open_browser(fake_audio=question)
        browser.open(f"{server.http_url}/")
        browser.wait_for(lambda: "Ready" in browser.text("status"), what="the ready status")
        browser.find("voice-start").click()
        browser.wait_for(lambda: voice_stats(browser)["state"] == "live", timeout=30, what="the session")
        stats = voice_stats(browser)
        assert stats["transport"] == "websocket" and "WebRTC calls" in stats["fallback"]
        assert "WebRTC failed" in browser.text("status")
        browser.wait_for(
            lambda: any(text.strip() for text in texts(browser, "voice-assistant-transcript")),
            timeout=60,
            what="the answer's transcript over the WebSocket",
        )
        # A sentence's words are sent as soon as they are known, its audio once synthesised: on a
        # busy machine the transcript shows a moment before the first audio delta.
        browser.wait_for(
            lambda: voice_stats(browser)["audioDeltas"] > 0, timeout=30, what="the answer's audio deltas"
        )
        browser.find("voice-stop").click()
