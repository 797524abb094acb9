"""The voice panel in real headless Chromium against a real /v1/realtime (the embedded cascade).

Chromium's fake microphone plays a question spoken by espeak-ng; the page must
capture it through its AudioWorklet, stream it, show the question's transcript
and the answer's, play the answer's audio through its player worklet, and tell
the server what it played with `playback.ack`. One server (cascade and
procedural-world, with an API key, so the key rides on the realtime socket
too) serves the whole module: loading the voice models once keeps this quick.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from page_browser import Browser, require_browser
from speech import write_question, write_speech

from livegen.server import ServerConfig
from livegen.server.thread import ServerThread

pytestmark = pytest.mark.slow  # loads the real voice models


ANSWER = "voice-assistant-transcript"
KEY = "voice-key"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    require_browser()  # before loading the voice models for nothing
    running = ServerThread(ServerConfig(api_key=KEY, world_model="procedural-world")).start()
    try:
        running.wait_ready(timeout=180)
        yield running
    finally:
        running.stop()


def open_page(open_browser: Callable[..., Browser], server: ServerThread, fake_audio: Path) -> Browser:
    """The page, unlocked with the key and ready, its fake microphone playing ``fake_audio`` once opened."""
    browser = open_browser(fake_audio=fake_audio)
    browser.open(server.http_url + "/?transport=websocket")  # these tests check the page's own player
    browser.wait_for(lambda: browser.find("api-key").is_displayed(), what="the API key field")
    browser.find("api-key").send_keys(KEY)
    browser.find("api-key-submit").click()
    browser.wait_for(lambda: "Ready" in browser.text("status"), what="the ready status")
    return browser


def texts(browser: Browser, test_id: str) -> list[str]:
    return [element.text for element in browser.find_all(test_id)]


def voice_stats(browser: Browser) -> dict:
    return dict(browser.js("return window.livegen.voice"))


def test_a_spoken_question_gets_a_spoken_answer(
    server: ServerThread, open_browser: Callable[..., Browser], tmp_path: Path
) -> None:
    question = write_question(tmp_path / "question.wav", "what time is it")
    browser = open_page(open_browser, server, question)
    browser.find("voice-start").click()
    browser.wait_for(lambda: voice_stats(browser)["state"] == "live", what="the voice session")

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
        lambda: "completed" in {r["status"] for r in voice_stats(browser)["responses"].values()},
        timeout=60,
        what="a completed response",
    )
    # The answer is heard through to its end, and the server told so.
    browser.wait_for(
        lambda: voice_stats(browser)["playedSamples"] >= voice_stats(browser)["receivedSamples"] > 0,
        timeout=60,
        what="the answer's audio played out",
    )
    stats = voice_stats(browser)
    browser.screenshot("voice-answered")
    assert stats["acksSent"] > 0
    answered = next(iter(stats["responses"]))
    played_ms = stats["responses"][answered]["playedSamples"] / 24
    assert stats["lastAck"]["response_id"] == answered
    assert abs(stats["lastAck"]["played_ms"] - played_ms) <= 1
    assert stats["turnLatenciesMs"], "no turn latency measured"
    assert browser.text("voice-latency") != "–"
    assert stats["errors"] == []

    browser.find("voice-stop").click()
    browser.wait_for(lambda: voice_stats(browser)["state"] == "off", what="the session to end")


def test_talking_over_an_answer_silences_it_at_once(
    server: ServerThread, open_browser: Callable[..., Browser], tmp_path: Path
) -> None:
    # A long answer (the help text, ~7 s), talked over 2.5 s after the question ends.
    speech = write_speech(tmp_path / "barge-in.wav", [(1.0, "what can you do"), (2.5, "what time is it")])
    browser = open_page(open_browser, server, speech)
    browser.find("voice-start").click()

    browser.wait_for(lambda: voice_stats(browser)["flushes"] >= 1, timeout=60, what="a barge-in flush")
    browser.wait_for(
        lambda: sum(r["status"] == "completed" for r in voice_stats(browser)["responses"].values()) >= 1,
        timeout=60,
        what="the second question's answer",
    )
    stats = voice_stats(browser)
    browser.screenshot("voice-barge-in")
    responses = list(stats["responses"].values())
    talked_over = [r for r in responses if r["status"] != "completed"]
    assert len(talked_over) == 1, responses
    assert talked_over[0]["status"] == "cancelled"
    # Flushed on the spot: played well short of the whole help answer (~7 s).
    assert talked_over[0]["playedSamples"] / 24 < 5000
    assert any(r["status"] == "completed" for r in responses)
    assert stats["errors"] == []
    interrupted = [b for b in browser.find_all("voice-assistant-transcript") if "interrupted" in b.text]
    assert interrupted, "the talked-over answer is not marked interrupted"


def test_interrupt_button_cancels_and_silences_the_answer(
    server: ServerThread, open_browser: Callable[..., Browser], tmp_path: Path
) -> None:
    question = write_question(tmp_path / "help.wav", "what can you do")
    browser = open_page(open_browser, server, question)
    browser.find("voice-start").click()

    browser.wait_for(
        lambda: voice_stats(browser)["playedSamples"] > 24 * 500, timeout=60, what="half a second played"
    )
    browser.find("voice-interrupt").click()
    browser.wait_for(lambda: voice_stats(browser)["flushes"] == 1, what="the flush")
    browser.wait_for(
        lambda: [r["status"] for r in voice_stats(browser)["responses"].values()] == ["cancelled"],
        what="response.done cancelled",
    )
    played = voice_stats(browser)["playedSamples"]
    assert played / 24 < 5000  # the help answer is ~7 s
    answer = browser.find_all("voice-assistant-transcript")[0]
    assert "interrupted" in answer.text
    # The server cut the history to what was heard; the page strikes out the rest.
    unheard = browser.wait_for(
        lambda: answer.find_elements("css selector", ".unheard"), what="the unheard part struck out"
    )
    assert unheard[0].text.strip()
    assert answer.find_element("css selector", ".text").text.startswith("I can")
    browser.screenshot("voice-interrupted")
    assert voice_stats(browser)["errors"] == []


def test_muted_microphone_is_not_heard(
    server: ServerThread, open_browser: Callable[..., Browser], tmp_path: Path
) -> None:
    question = write_question(tmp_path / "question.wav", "what time is it", lead_s=2.0, tail_s=3.0)
    browser = open_page(open_browser, server, question)
    browser.find("voice-start").click()
    browser.wait_for(lambda: voice_stats(browser)["state"] == "live", what="the voice session")
    browser.find("voice-mute").click()
    assert browser.find("voice-mute").get_attribute("aria-pressed") == "true"
    # The question plays into a muted microphone: silence keeps streaming, and nothing is heard.
    sent = voice_stats(browser)["framesSent"]
    browser.wait_for(lambda: voice_stats(browser)["framesSent"] > sent + 350, what="7 s of muted audio")
    assert browser.find_all("voice-user-transcript") == []
    assert voice_stats(browser)["responses"] == {}


def test_talk_and_play_at_once(
    server: ServerThread, open_browser: Callable[..., Browser], tmp_path: Path
) -> None:
    """The first look: both panels live on one page, keys steering the world while the voice answers."""
    from test_world_page import ARROWS, key_press, move

    question = write_question(tmp_path / "question.wav", "what is twelve times seven", lead_s=2.0)
    browser = open_page(open_browser, server, question)
    browser.find("world-start").click()
    browser.wait_for(lambda: browser.js("return window.livegen.world.framesDrawn") >= 8, what="frames")
    browser.find("voice-start").click()
    move(browser, key_press(browser), ARROWS)
    browser.wait_for(
        lambda: any("84" in text or "eighty" in text.lower() for text in texts(browser, ANSWER)),
        timeout=60,
        what="the answer, 84",
    )
    browser.wait_for(
        lambda: voice_stats(browser)["playedSamples"] >= voice_stats(browser)["receivedSamples"] > 0,
        timeout=60,
        what="the answer's audio played out",
    )
    browser.screenshot("page-both-live")
    assert voice_stats(browser)["errors"] == []
    assert browser.js("return window.livegen.world.errors") == []
