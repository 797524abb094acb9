"""Shared worlds on the page, in real headless Chromium against a real server (issue 39): two tabs
on one server both play their own worlds at once; the first tab's "Invite a player" gives a page
link, and a second browser that opens it plays the same procedural-world as player 2 over the
WebSocket, its arrow keys moving the second agent, not the first; a bad link says the server's
refusal (a wrong token, an expired one) in words.

The joined player's frames come over the WebSocket as the owner's call encodes them for its
track (``rgb24``), so its canvas holds the game's exact pixels: the agents are found by colour.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from page_browser import Browser
from test_world_page import ARROWS, KEY, key_press, move, open_world, settled_frame, stats

from livegen.models.room import game
from livegen.server.thread import ServerThread

#: The page asks for no seed: the server's default room.
SEED = 0


def unlock(browser: Browser, url: str) -> None:
    """Open ``url`` on the page and give it the server's key."""
    browser.open(url)
    browser.wait_for(lambda: browser.find("api-key").is_displayed(), what="the API key field")
    browser.find("api-key").send_keys(KEY)
    browser.find("api-key-submit").click()


def drawn_past(browser: Browser, count: int) -> Callable[[], bool]:
    """Whether the tab has drawn more than ``count`` frames."""
    return lambda: bool(stats(browser)["framesDrawn"] > count)


def where(frame: np.ndarray, colour: tuple[int, ...]) -> tuple[int, int] | None:
    """The top-left pixel of ``colour`` in the frame (an agent's position), or None if absent."""
    ys, xs = np.nonzero(np.all(frame == colour, axis=-1))
    return (int(xs.min()), int(ys.min())) if len(xs) else None


# procedural-world: whether a tiny-world server admits a second realtime session depends on the
# step time it measures on this machine (admission by the batch's cost), not on the page.
@pytest.mark.parametrize(("world_model", "expect"), [("procedural-world", "procedural-world")])
def test_two_tabs_on_one_server_both_play(
    start_server: Callable[..., ServerThread],
    open_browser: Callable[..., Browser],
    world_model: str,
    expect: str,
) -> None:
    """Two browsers, two sessions of their own on one server: frames drawn in both at once."""
    first, server = open_world(start_server, open_browser, world_model=world_model, expect=expect)
    second = open_browser()
    unlock(second, server.http_url + "/")
    second.wait_for(lambda: second.find("world-start").is_enabled(), what="Start in the second tab")
    second.find("world-start").click()
    second.wait_for(
        lambda: stats(second)["framesDrawn"] >= 8 or stats(second)["state"] == "failed-closed",
        what="the second tab's first frames, or its refusal",
    )
    assert stats(second)["state"] == "live", second.text("world-state")
    drawn = {tab: stats(tab)["framesDrawn"] for tab in (first, second)}
    for tab in (first, second):  # both go on playing, neither at the other's expense
        tab.wait_for(drawn_past(tab, drawn[tab] + 16), what="a second more of frames")
        assert stats(tab)["state"] == "live" and stats(tab)["errors"] == []
        assert stats(tab)["player"] is None  # each owns its world
    # The invite is offered only where the model takes more than one player.
    assert first.find("world-invite").is_displayed() == (expect == "procedural-world")


def test_a_second_player_joins_from_the_invite_link_and_steers_its_own_agent(
    start_server: Callable[..., ServerThread], open_browser: Callable[..., Browser]
) -> None:
    owner, server = open_world(start_server, open_browser)
    owner.find("world-invite").click()
    link = owner.wait_for(
        lambda: owner.find("world-invite-link").get_attribute("value"), what="the invite link"
    )
    query = parse_qs(urlsplit(link).query)
    assert link.startswith(server.http_url + "/?join=") and query["token"]
    assert "invite link ready" in owner.text("status")

    player = open_browser()
    unlock(player, link)  # the link plays as soon as the key is in
    player.wait_for(lambda: stats(player)["framesDrawn"] >= 8, what="the player's first frames")
    session_id = query["join"][0]
    assert stats(player)["player"] == 2 and stats(player)["transport"] == "websocket"
    assert f"player 2 in {session_id}" in player.text("status")
    assert not player.find("world-invite").is_displayed() and not player.find("world-reset").is_enabled()

    start = game.new_game(SEED)
    first_colour = tuple(int(v) for v in game.render(start)[start.agent[1], start.agent[0]])
    second_colour = game.AGENT_2[start.theme]
    before = settled_frame(player)
    first_home = where(before, first_colour)
    assert first_home == start.agent and where(before, second_colour) is None  # nobody steered agent 2 yet

    # The player's arrows bring in and move the second agent; the first stays where it was.
    entered = move(player, key_press(player), ARROWS)
    second_at = where(entered, second_colour)
    assert second_at is not None and where(entered, first_colour) == first_home
    moved = move(player, key_press(player), ARROWS)
    assert where(moved, second_colour) not in (None, second_at)
    assert where(moved, first_colour) == first_home
    assert stats(player)["eventsAccepted"] >= 2
    assert stats(player)["latenciesMs"], "the player's own events came back in its chunks' applied_events"
    assert stats(player)["errors"] == [] and stats(owner)["errors"] == []
    assert stats(owner)["state"] == "live"


@pytest.mark.parametrize(
    ("ttl_s", "spoil", "code", "words"),
    [
        (600.0, "not", "invalid_player_token", "no live world session has this id and player token"),
        (0.0, "", "player_token_expired", "the player token has expired"),  # expired as it is made
    ],
)
def test_a_bad_or_expired_invite_link_says_the_servers_refusal(
    start_server: Callable[..., ServerThread],
    open_browser: Callable[..., Browser],
    ttl_s: float,
    spoil: str,
    code: str,
    words: str,
) -> None:
    owner, _ = open_world(start_server, open_browser, world_spectate_token_ttl_s=ttl_s)
    owner.find("world-invite").click()
    link = owner.wait_for(
        lambda: owner.find("world-invite-link").get_attribute("value"), what="the invite link"
    )
    player = open_browser()
    unlock(player, link.replace("token=", f"token={spoil}"))
    player.wait_for(lambda: stats(player)["state"] == "failed-closed", what="the refusal")
    shown = player.text("world-state")
    assert shown.startswith(f"Stopped: {words}"), shown
    assert words in player.text("status")
    assert stats(player)["errors"] == [code] and stats(player)["player"] is None
    assert stats(owner)["state"] == "live" and stats(owner)["errors"] == []  # the owner goes on
