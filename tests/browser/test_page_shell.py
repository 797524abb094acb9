"""The page itself in a real browser: it loads from the server, says what it sees, and asks for a key."""

from __future__ import annotations

from collections.abc import Callable

from page_browser import Browser

from livegen.models import Kind, ModelInfo, Registry
from livegen.server.thread import ServerThread


def listed_only_loader() -> object:
    raise AssertionError("the shell tests only list this model; they never load it")


# Listed by /v1/models but never served (voice_model/world_model "none"): the page
# only reads the list here; the panels' own tests use real models.
LISTED_WORLD = ModelInfo("listed-world", Kind.WORLD, f"{__name__}:listed_only_loader", "a listed entry")


def listing_server(start_server: Callable[..., ServerThread], **config: object) -> ServerThread:
    return start_server(registry=Registry([LISTED_WORLD]), voice_model="none", world_model="none", **config)


def test_page_loads_and_names_the_served_models(
    start_server: Callable[..., ServerThread], open_browser: Callable[..., Browser]
) -> None:
    server = listing_server(start_server)
    browser = open_browser()
    browser.open(server.http_url + "/")
    browser.wait_for(lambda: "Ready" in browser.text("status"), what="the ready status")
    assert "listed-world" in browser.text("status")
    assert browser.find("world-start").is_enabled()
    assert not browser.find("voice-start").is_enabled()
    assert "no voice model" in browser.find("voice-state").text.lower()
    for test_id in ("voice-stop", "world-canvas", "world-prompt", "world-reset"):
        assert browser.find(test_id).is_displayed()
    browser.screenshot("shell-ready")
    severe = [line for line in browser.console().splitlines() if line.startswith("SEVERE")]
    assert severe == []


def test_page_asks_for_the_api_key_and_uses_it(
    start_server: Callable[..., ServerThread], open_browser: Callable[..., Browser]
) -> None:
    server = listing_server(start_server, api_key="sekrit-key")
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
