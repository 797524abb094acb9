"""A page that leaves during a WebRTC call and comes back takes its session back, in headless Chromium.

The page keeps its call's session id, resume token and event count in
sessionStorage; opened again (a reload, or navigating back) within the resume
grace it offers a call that resumes the parked session (docs/voice-protocol.md,
Calls), and the conversation it showed goes on. A resume the server refuses (the
session ended meanwhile) gives a new session, and the status line says so. The
server's /health says, over the wire, whether the session parked, ended or
went on.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from page_browser import Browser, require_browser
from speech import write_question

from livegen.server import ServerConfig
from livegen.server.thread import ServerThread

pytestmark = pytest.mark.slow  # loads the real voice models


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    require_browser()  # before loading the voice models for nothing
    running = ServerThread(ServerConfig(api_key=None, world_model="none")).start()
    try:
        running.wait_ready(timeout=180)
        yield running
    finally:
        running.stop()


def voice_stats(browser: Browser) -> dict[str, Any]:
    return dict(browser.js("return window.livegen.voice"))


def texts(browser: Browser, test_id: str) -> list[str]:
    return [element.text for element in browser.find_all(test_id)]


def voice_health(server: ServerThread) -> dict[str, Any]:
    return dict(httpx.get(f"{server.http_url}/health", timeout=10).json()["services"]["voice"])


def until_health(server: ServerThread, what: str, **expected: int) -> None:
    """Poll /health until the voice service reports ``expected`` (the page may be away meanwhile)."""
    deadline = time.monotonic() + 30
    while {name: voice_health(server).get(name) for name in expected} != expected:
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}: /health says {voice_health(server)}")
        time.sleep(0.1)


def start_call(browser: Browser, url: str) -> str | None:
    """Open the page, start a call, and answer its session id (as the page knows it) once it is live."""
    browser.open(url)
    browser.wait_for(lambda: "Ready" in browser.text("status"), what="the ready status")
    browser.find("voice-start").click()
    browser.wait_for(lambda: voice_stats(browser)["state"] == "live", what="the call")
    stats = voice_stats(browser)
    assert stats["transport"] == "webrtc", stats["fallback"]
    return stats.get("sessionId")


def until_live_again(browser: Browser) -> None:
    browser.wait_for(
        lambda: voice_stats(browser)["state"] == "live",
        what="the page to take its call back on its own",
        explain=lambda: voice_stats(browser),
    )


async def ask_for_an_answer(server: ServerThread, call_id: str) -> None:
    """A backend attached to the (new) call asks the session to answer again."""
    async with websockets.connect(f"{server.ws_url}/v1/realtime?call_id={call_id}") as ws:
        await ws.send(json.dumps({"type": "response.create"}))
        while json.loads(await asyncio.wait_for(ws.recv(), 60))["type"] != "response.done":
            pass


def test_a_page_that_comes_back_takes_its_call_back(
    server: ServerThread, open_browser: Callable[..., Browser], tmp_path: Path
) -> None:
    browser = open_browser(fake_audio=write_question(tmp_path / "question.wav", "what time is it"))
    url = f"{server.http_url}/"
    session_id = start_call(browser, url)
    browser.wait_for(
        lambda: "completed" in {r["status"] for r in voice_stats(browser)["responses"].values()},
        timeout=60,
        what="the answer",
    )
    asked, answered = texts(browser, "voice-user-transcript"), texts(browser, "voice-assistant-transcript")
    assert any("time" in text.lower() for text in asked), asked

    browser.driver.refresh()  # the call's connection is lost without a goodbye
    until_live_again(browser)
    stats = voice_stats(browser)
    assert stats["resume"] == "resumed" and stats["sessionId"] == session_id, stats
    assert session_id is not None and session_id.startswith("sess_")
    assert "took the call back" in browser.text("status")
    # The conversation shown before goes on (the fake microphone may ask again after it).
    assert texts(browser, "voice-user-transcript")[: len(asked)] == asked
    assert texts(browser, "voice-assistant-transcript")[: len(answered)] == answered
    until_health(server, "the session to be live again", live_sessions=1, parked_sessions=0)

    # The same session answers on the new call: its answer shows, and plays from the new track.
    before = len(texts(browser, "voice-assistant-transcript"))
    asyncio.run(ask_for_an_answer(server, stats["callId"]))
    browser.wait_for(
        lambda: (
            len(texts(browser, "voice-assistant-transcript")) > before
            and "output_audio_buffer.started" in {e["type"] for e in voice_stats(browser)["trackEvents"]}
        ),
        timeout=30,
        what="the resumed session's answer on the new call",
        explain=lambda: voice_stats(browser),
    )
    assert voice_stats(browser)["sessionId"] == session_id
    browser.find("voice-stop").click()
    browser.wait_for(lambda: voice_stats(browser)["state"] == "off", what="the call to end")
    assert browser.js("return sessionStorage.getItem('livegen.voiceCall')") is None  # nothing to resume


def test_a_refused_resume_starts_a_new_session_and_says_so(
    open_browser: Callable[..., Browser], tmp_path: Path
) -> None:
    # No parked sessions at all: the lost call's session ends at once, so its resume is refused.
    with ServerThread(ServerConfig(api_key=None, world_model="none", max_parked_sessions=0)) as server:
        server.wait_ready(timeout=180)
        browser = open_browser(fake_audio=write_question(tmp_path / "question.wav", "what time is it"))
        url = f"{server.http_url}/"
        session_id = start_call(browser, url)
        browser.wait_for(lambda: texts(browser, "voice-user-transcript"), timeout=60, what="a turn")

        # Away until the server has ended the session (its call is lost and nothing may park),
        # then back in the same tab, its sessionStorage with it.
        browser.open("about:blank")
        until_health(server, "the lost call's session to end", live_sessions=0, parked_sessions=0)
        browser.open(url)
        until_live_again(browser)
        stats = voice_stats(browser)
        assert stats["resume"].startswith("refused: "), stats
        assert session_id is not None and session_id.startswith("sess_")
        assert stats["sessionId"].startswith("sess_") and stats["sessionId"] != session_id, stats
        status = browser.text("status")
        assert "could not be taken back" in status and "listening" in status, status
        until_health(server, "the new session", live_sessions=1, parked_sessions=0)
        browser.find("voice-stop").click()
