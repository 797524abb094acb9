"""The page itself in a real browser: it loads from the server, says what it sees, and asks for a key."""

from __future__ import annotations

from collections.abc import Callable

from page_browser import Browser

from livegen.server.thread import ServerThread


def world_only_server(start_server: Callable[..., ServerThread], **config: object) -> ServerThread:
    """The quick-loading procedural world and no voice model: the shell tests need no big model."""
    return start_server(voice_model="none", world_model="procedural-world", **config)


def test_page_loads_and_names_the_served_models(
    start_server: Callable[..., ServerThread], open_browser: Callable[..., Browser]
) -> None:
    server = world_only_server(start_server)
    browser = open_browser()
    browser.open(server.http_url + "/")
    browser.wait_for(lambda: "Ready" in browser.text("status"), what="the ready status")
    assert "procedural-world" in browser.text("status")
    assert browser.find("world-start").is_enabled()
    assert not browser.find("voice-start").is_enabled()
    assert "serves no voice model" in browser.text("voice-state")
    for test_id in ("voice-stop", "world-canvas", "world-prompt", "world-reset"):
        assert browser.find(test_id).is_displayed()
    browser.screenshot("shell-ready")
    severe = [line for line in browser.console().splitlines() if line.startswith("SEVERE")]
    assert severe == []


def test_page_asks_for_the_api_key_and_uses_it(
    start_server: Callable[..., ServerThread], open_browser: Callable[..., Browser]
) -> None:
    server = world_only_server(start_server, api_key="sekrit-key")
    browser = open_browser()
    browser.open(server.http_url + "/")
    key_field = browser.find("api-key")
    browser.wait_for(key_field.is_displayed, what="the API key field")
    assert "needs an API key" in browser.text("status")
    assert not browser.find("world-start").is_enabled()
    browser.screenshot("shell-key-asked")

    key_field.send_keys("wrong-key")
    browser.find("api-key-submit").click()
    browser.wait_for(lambda: "refused" in browser.text("status"), what="the refused-key status")
    assert key_field.is_displayed()

    key_field.send_keys("sekrit-key")
    browser.find("api-key-submit").click()
    browser.wait_for(lambda: "Ready" in browser.text("status"), what="the ready status")
    assert not key_field.is_displayed()
    assert browser.find("world-start").is_enabled()
    # The key is kept for this tab, so a reload does not ask again.
    browser.driver.refresh()
    browser.wait_for(lambda: "Ready" in browser.text("status"), what="the ready status after a reload")
