"""The world panel in real headless Chromium against a real /v1/worlds (procedural-world, whose
frames are exact; and the default, tiny-world, as a new user gets it). The page plays over WebRTC
(/v1/worlds/calls, frames on a video track drawn into the canvas) unless a test asks for the
WebSocket (``?transport=websocket``: the page's own player, acks and chunks-ahead steps).

Keys and on-screen buttons must move the agent (frames change), releasing them
must stop it (frames settle: the sticky action went back to "none"), a prompt
must restyle the room, and reset must start the world again. The stream only
keeps going because the page acks each chunk it has shown. The server needs
an API key here, so the page's key form and the WebSocket key subprotocol are
on the path too.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest
from page_browser import Browser
from PIL import Image
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys

from livegen.server.thread import ServerThread

KEY = "world-key"
# Reads the 32x32 canvas itself: exact model pixels, unlike a scaled screenshot.
READ_CANVAS = """
const canvas = document.querySelector('[data-testid=world-canvas]');
return Array.from(canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data);
"""


def canvas_pixels(browser: Browser) -> np.ndarray:
    data = np.array(browser.js(READ_CANVAS), dtype=np.uint8)
    return data.reshape(32, 32, 4)[:, :, :3]


def stats(browser: Browser) -> dict:
    return dict(browser.js("return window.livegen.world"))


def settled_frame(browser: Browser, timeout: float = 20.0) -> np.ndarray:
    """The canvas once it has stopped changing for half a second (eight frames at 16 fps).

    Over WebRTC the frames come through VP8, whose encoder goes on refining a still picture as its
    bitrate adapts (more so on a busy machine), so a settled frame may still differ by a few levels
    here and there: only a visible change (``changed_fraction``) counts as movement."""
    deadline = time.monotonic() + timeout
    previous = canvas_pixels(browser)
    since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        current = canvas_pixels(browser)
        if changed_fraction(current, previous) > 0.005:
            previous, since = current, time.monotonic()
        elif time.monotonic() - since >= 0.5:
            return current
    raise AssertionError("the world never stopped changing with no key held")


#: A pixel "changed" when a channel moved by more than this: the codec's refinements of a still
#: picture stay well under it; the agent and the walls it passes differ by far more.
VISIBLE_LEVELS = 32


def visibly_changed(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Which pixels visibly changed between two frames."""
    difference = np.abs(a.astype(np.int16) - b.astype(np.int16))
    return np.any(difference > VISIBLE_LEVELS, axis=-1)


def changed_fraction(a: np.ndarray, b: np.ndarray) -> float:
    """The share of pixels that visibly changed (the 4x4 agent alone is 1.6% of 32x32)."""
    return float(visibly_changed(a, b).mean())


def hold(browser: Browser, key: str, seconds: float) -> None:
    drawn = stats(browser)["framesDrawn"]
    ActionChains(browser.driver).key_down(key).perform()
    time.sleep(seconds)
    ActionChains(browser.driver).key_up(key).perform()
    browser.wait_for(lambda: stats(browser)["framesDrawn"] > drawn + 4, what="frames after the key")


def move(browser: Browser, press: Callable[[str], None], directions: list[str]) -> np.ndarray:
    """Press each way in turn until the settled frame changes (a wall or the crate may block one way)."""
    before = settled_frame(browser)
    for direction in directions:
        press(direction)
        after = settled_frame(browser)
        if changed_fraction(before, after) > 0.005:  # the 4x4 agent moved
            return after
    raise AssertionError(f"no frame change after pressing {directions}")


def key_press(browser: Browser, seconds: float = 0.6) -> Callable[[str], None]:
    return lambda key: hold(browser, key, seconds)


def pad_press(browser: Browser, seconds: float = 0.6) -> Callable[[str], None]:
    def press(direction: str) -> None:
        button = browser.find(f"world-control-{direction}")
        drawn = stats(browser)["framesDrawn"]
        ActionChains(browser.driver).click_and_hold(button).pause(seconds).release().perform()
        browser.wait_for(lambda: stats(browser)["framesDrawn"] > drawn + 4, what="frames after the button")

    return press


ARROWS = [Keys.ARROW_RIGHT, Keys.ARROW_LEFT, Keys.ARROW_DOWN, Keys.ARROW_UP]


def save_canvas(browser: Browser, name: str) -> Image.Image:
    return browser.screenshot(name, "world-canvas")


def open_world(
    start_server: Callable[..., ServerThread],
    open_browser: Callable[..., Browser],
    world_model: str = "procedural-world",
    expect: str = "procedural-world",
    page: str = "/",
    before_start: str | None = None,
    **config: Any,
) -> tuple[Browser, ServerThread]:
    """The page playing a world: over WebRTC by default, or as ``page`` (e.g. ``/?transport=websocket``)
    and ``before_start`` (a script run before Start is pressed) make it."""
    server = start_server(api_key=KEY, voice_model="none", world_model=world_model, **config)
    server.wait_ready()
    browser = open_browser()
    browser.open(server.http_url + page)
    browser.wait_for(lambda: browser.find("api-key").is_displayed(), what="the API key field")
    browser.find("api-key").send_keys(KEY)
    browser.find("api-key-submit").click()
    browser.wait_for(lambda: expect in browser.text("status"), what="the ready status")
    if before_start is not None:
        browser.js(before_start)
    browser.find("world-start").click()
    browser.wait_for(lambda: stats(browser)["framesDrawn"] >= 8, what="the first frames")
    assert stats(browser)["state"] == "live"
    return browser, server


def test_the_page_asks_for_one_frame_chunks_from_a_default_server(
    start_server: Callable[..., ServerThread], open_browser: Callable[..., Browser]
) -> None:
    """Issue 30: a page user gets the interactive chunk length without a server flag (4-frame
    chunks kept an input waiting up to 250 ms for the next chunk)."""
    from livegen.server.world.service import WorldService

    browser, server = open_world(start_server, open_browser)
    [service] = [s for s in server.app.state.livegen.services if isinstance(s, WorldService)]
    lengths = [c.runner.spec.frames_per_chunk for c in service.connections if c.runner is not None]
    assert lengths == [1], "the page's session plays one-frame chunks"
    assert service.engine.scheduler is not None and service.engine.scheduler.spec.frames_per_chunk == 4
    assert stats(browser)["errors"] == []


def test_keys_move_the_world_and_release_stops_it(
    start_server: Callable[..., ServerThread], open_browser: Callable[..., Browser]
) -> None:
    browser, _ = open_world(start_server, open_browser)
    save_canvas(browser, "world-start")
    move(browser, key_press(browser), ARROWS)
    save_canvas(browser, "world-after-arrows")
    # The move was applied in a chunk the page showed, and timed.
    assert stats(browser)["latenciesMs"], "no applied event came back in a chunk"
    move(browser, key_press(browser), ["d", "a", "s", "w"])
    # The on-screen pad sends the same control while pressed.
    move(browser, pad_press(browser), ["left", "right", "up", "down"])
    browser.screenshot("world-page-moved")

    # The page plays over WebRTC by default (issue 29): frames on the video track, drawn on the canvas.
    current = stats(browser)
    assert current["transport"] == "webrtc" and current["fallback"] is None
    assert_acked(current)
    assert current["errors"] == []


def assert_acked(current: dict[str, Any]) -> None:
    """Only acked chunks free credit: well past max_chunks_ahead means chunks are acked, by the page
    on the WebSocket (at each chunk's first frame), by the server's track on a call (the page sends
    none: the track's send position is the ack)."""
    assert current["chunksReceived"] > 8
    if current["transport"] == "webrtc":
        assert current["acksSent"] == 0
    else:
        assert current["acksSent"] >= current["chunksReceived"] - 5


def test_without_webrtc_the_page_plays_over_the_websocket_and_says_so(
    start_server: Callable[..., ServerThread], open_browser: Callable[..., Browser]
) -> None:
    browser, _ = open_world(start_server, open_browser, before_start="window.RTCPeerConnection = undefined;")
    current = stats(browser)
    assert current["transport"] == "websocket"
    assert current["fallback"].startswith("WebRTC failed (this browser has no WebRTC)")
    assert "WebRTC failed" in browser.text("status") and "playing over the WebSocket" in browser.text(
        "status"
    )
    move(browser, key_press(browser), ARROWS)
    assert_acked(stats(browser))
    assert stats(browser)["errors"] == []


def test_the_default_world_is_generated_and_the_keys_steer_it(
    start_server: Callable[..., ServerThread], open_browser: Callable[..., Browser]
) -> None:
    """A new user's world: the default model, tiny-world, generating frames the keys steer."""
    browser, _ = open_world(start_server, open_browser, world_model="auto", expect="tiny-world")
    save_canvas(browser, "tiny-world-start")
    move(browser, key_press(browser), ARROWS)
    save_canvas(browser, "tiny-world-moved")
    assert stats(browser)["latenciesMs"], "no applied event came back in a chunk"
    assert stats(browser)["errors"] == []


def test_one_frame_chunks_play_and_the_keys_steer_them(
    start_server: Callable[..., ServerThread], open_browser: Callable[..., Browser]
) -> None:
    """tiny-world served at one frame a chunk (``--world-frames-per-chunk 1``): the page plays
    chunks of whatever length the server sends, acks each, and the keys still steer."""
    browser, _ = open_world(
        start_server, open_browser, world_model="tiny-world", expect="tiny-world", world_frames_per_chunk=1
    )
    move(browser, key_press(browser), ARROWS)
    current = stats(browser)
    assert current["latenciesMs"], "no applied event came back in a chunk"
    assert current["chunksReceived"] >= current["framesDrawn"] > 16  # one frame a chunk
    assert_acked(current)
    assert current["errors"] == []


def test_prompt_restyles_and_reset_starts_again(
    start_server: Callable[..., ServerThread], open_browser: Callable[..., Browser]
) -> None:
    browser, _ = open_world(start_server, open_browser)
    before = settled_frame(browser)
    moved = move(browser, key_press(browser), ARROWS)

    browser.find("world-prompt").send_keys("a snow room", Keys.ENTER)
    browser.wait_for(
        lambda: canvas_pixels(browser).mean() > moved.mean() + 40, what="the snow theme (a brighter room)"
    )
    save_canvas(browser, "world-snow")

    index_before = stats(browser)["lastChunkIndex"]
    browser.find("world-reset").click()
    browser.wait_for(lambda: stats(browser)["resets"] == 1, what="world.reset.done")
    browser.wait_for(lambda: stats(browser)["lastChunkIndex"] is not None, what="a chunk after reset")
    browser.wait_for(lambda: stats(browser)["lastChunkIndex"] < index_before, what="chunk indices from 0")
    after_reset = settled_frame(browser)
    save_canvas(browser, "world-reset")
    # Same seed, same room: the agent is back where it started.
    agent_moved = visibly_changed(before, moved)
    assert np.any(visibly_changed(after_reset, moved)[agent_moved])
    assert stats(browser)["state"] == "live"


def test_pacing_off_runs_faster_than_the_model_fps_and_end_closes(
    start_server: Callable[..., ServerThread], open_browser: Callable[..., Browser]
) -> None:
    # Over a call the track plays at the frame clock whatever the pacing: this is the WebSocket's.
    browser, server = open_world(start_server, open_browser, page="/?transport=websocket")
    browser.wait_for(lambda: stats(browser)["fps"] >= 12, what="realtime playback near 16 fps")
    assert stats(browser)["fps"] <= 18
    browser.find("world-pacing").click()
    browser.wait_for(lambda: stats(browser)["fps"] > 24, what="asap playback above the model's 16 fps")
    fps_text = browser.text("world-fps")
    assert int(fps_text) > 16

    def open_sessions() -> int:
        health = httpx.get(f"{server.http_url}/health").json()
        return int(health["services"]["world"]["sessions"])

    assert open_sessions() == 1
    browser.find("world-stop").click()
    assert stats(browser)["state"] == "off"
    assert browser.find("world-start").is_enabled()
    browser.wait_for(lambda: open_sessions() == 0, what="the server to close the session")


class SlowWorld:
    """The procedural world, stepping unevenly: every other chunk takes longer than a chunk plays
    (330 ms for 250 ms), the others 100 ms, so on average it keeps up only with a chunk in hand."""

    STEP_S = (0.1, 0.33)

    def __init__(self) -> None:
        from livegen.models.room.procedural import load

        self.inner = load()
        self.name = "slow-world"
        # A step costs its time per chunk, whatever the chunk's length (as causal Wan's): it makes
        # only the room game's 4 frames, so the page's ask for one-frame chunks gets 4.
        self.spec = dataclasses.replace(self.inner.spec, min_frames_per_chunk=None)
        self.num_steps = 0

    def new_kv_storage(self, num_pages: int) -> object:
        return self.inner.new_kv_storage(num_pages)

    def step(self, ticks: object, kv_storage: object) -> object:
        self.num_steps += 1
        time.sleep(self.STEP_S[self.num_steps % 2])  # runs in the scheduler's worker thread
        return self.inner.step(ticks, kv_storage)  # type: ignore[arg-type]

    def release(self, session_id: str) -> None:
        self.inner.release(session_id)


def load_slow_world() -> SlowWorld:
    return SlowWorld()


class SteadyWorld(SlowWorld):
    """75 ms for every chunk: slower than a frame (62 ms), so a page that acked at a chunk's last
    frame would stall at every chunk; a third of a chunk (250 ms), so that a loaded machine's
    encoding and drawing (other test suites beside it) still fit in the rest."""

    STEP_S = (0.075, 0.075)


def load_steady_world() -> SteadyWorld:
    return SteadyWorld()


def test_at_one_chunk_ahead_the_next_chunk_is_made_while_one_plays(
    start_server: Callable[..., ServerThread], open_browser: Callable[..., Browser]
) -> None:
    """The page acks a chunk as its first frame shows, so a step slower than a frame but faster
    than a chunk never shows as a gap: it plays at one chunk ahead without stalling (acking at
    the last frame, every chunk stalled for its whole step)."""
    from livegen.models import Kind, ModelInfo, Registry

    steady = ModelInfo("steady-world", Kind.WORLD, f"{__name__}:load_steady_world", "procedural, 100 ms")
    server = start_server(registry=Registry([steady]), voice_model="none", world_model="steady-world")
    server.wait_ready()
    browser = open_browser()
    browser.open(server.http_url + "/?transport=websocket")  # the page's own player and acks
    browser.wait_for(lambda: "steady-world" in browser.text("status"), what="the ready status")
    browser.find("world-start").click()
    browser.wait_for(lambda: stats(browser)["framesDrawn"] > 16, what="the first second of frames")
    stalls = stats(browser)["stalls"]
    drawn = stats(browser)["framesDrawn"]
    browser.wait_for(lambda: stats(browser)["framesDrawn"] > drawn + 48, what="3 s more of frames")
    assert stats(browser)["stalls"] - stalls <= 1
    assert stats(browser)["chunksAhead"] == 1
    assert stats(browser)["errors"] == []


def test_stalls_ask_the_server_to_run_further_ahead(
    start_server: Callable[..., ServerThread], open_browser: Callable[..., Browser]
) -> None:
    from livegen.models import Kind, ModelInfo, Registry

    slow = ModelInfo("slow-world", Kind.WORLD, f"{__name__}:load_slow_world", "procedural, slowed down")
    server = start_server(registry=Registry([slow]), voice_model="none", world_model="slow-world")
    server.wait_ready()
    browser = open_browser()
    browser.open(server.http_url + "/?transport=websocket")  # the page's own player and acks
    browser.wait_for(lambda: "slow-world" in browser.text("status"), what="the ready status")
    browser.find("world-start").click()
    # Even generated while the chunk before plays (the page acks at start), a 330 ms step is
    # late for a 250 ms chunk: playback stalls, and the page asks for more chunks ahead until
    # the quick steps make up for the slow ones.
    browser.wait_for(lambda: stats(browser)["chunksAhead"] >= 2, what="a step up in chunks ahead")
    stepped_at = stats(browser)["stalls"]
    drawn = stats(browser)["framesDrawn"]
    browser.wait_for(lambda: stats(browser)["framesDrawn"] > drawn + 48, what="3 s more of frames")
    assert stats(browser)["stalls"] - stepped_at <= 2
    assert "ahead" in browser.text("world-chunk")
    assert stats(browser)["errors"] == []


def test_a_refused_event_is_said_in_words_and_the_world_goes_on(
    start_server: Callable[..., ServerThread], open_browser: Callable[..., Browser]
) -> None:
    browser, _ = open_world(start_server, open_browser)
    browser.js(
        "const box = document.querySelector('[data-testid=world-prompt]');"
        "box.value = 'x'.repeat(5000); box.form.requestSubmit();"
    )
    browser.wait_for(lambda: stats(browser)["errors"], what="the error event")
    status = browser.text("status")
    assert status.startswith("World: ") and "prompt" in status.lower(), status
    assert browser.find("status").get_attribute("data-level") == "warn"
    drawn = stats(browser)["framesDrawn"]
    browser.wait_for(lambda: stats(browser)["framesDrawn"] > drawn + 8, what="frames after the error")
    assert stats(browser)["state"] == "live"


def test_a_lost_server_is_said_in_words(
    start_server: Callable[..., ServerThread], open_browser: Callable[..., Browser]
) -> None:
    browser, server = open_world(start_server, open_browser)
    server.stop()
    browser.wait_for(lambda: stats(browser)["state"] != "live", what="the page to notice")
    words = browser.text("world-state")
    browser.screenshot("world-server-gone")
    assert words.startswith(("Stopped: the server", "Closed by the server")), words
    assert browser.find("world-start").is_enabled()


def tap(browser: Browser) -> Callable[[str], None]:
    def press(key: str) -> None:
        drawn = stats(browser)["framesDrawn"]
        ActionChains(browser.driver).key_down(key).key_up(key).perform()
        browser.wait_for(lambda: stats(browser)["framesDrawn"] > drawn + 8, what="frames after the tap")

    return press


def test_a_quick_key_tap_moves_the_agent(
    start_server: Callable[..., ServerThread], open_browser: Callable[..., Browser]
) -> None:
    """A press and release far shorter than a chunk (250 ms) land in one chunk: on the `keys` track
    the server makes them a tap, one frame of movement, where last-write-wins lost the press."""
    browser, _ = open_world(start_server, open_browser)
    move(browser, tap(browser), ARROWS)
    assert stats(browser)["errors"] == []


def test_the_page_steers_causal_wan_tiny_with_keys_and_mouse(
    start_server: Callable[..., ServerThread], open_browser: Callable[..., Browser]
) -> None:
    """The causal Wan architecture behind the page: 64x64 frames, and its keys and mouse tracks fed
    from the keyboard and drags over the canvas, each applied in a chunk that comes back."""
    pytest.importorskip("diffusers")
    browser, _ = open_world(start_server, open_browser, "causal-wan-tiny", "causal-wan-tiny")
    assert browser.js("return document.querySelector('[data-testid=world-canvas]').width") == 64
    sent = stats(browser)["eventsSent"]
    ActionChains(browser.driver).key_down("w").key_up("w").perform()
    canvas = browser.find("world-canvas")
    ActionChains(browser.driver).click_and_hold(canvas).move_by_offset(12, 4).pause(0.3).release().perform()
    browser.wait_for(lambda: stats(browser)["eventsSent"] >= sent + 4, what="key and mouse events sent")
    browser.wait_for(lambda: len(stats(browser)["latenciesMs"]) >= 4, what="the events applied in chunks")
    assert stats(browser)["errors"] == []
