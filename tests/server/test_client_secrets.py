"""A client secret's session is checked when the key is minted exactly as its ``session.update`` would be.

The key's session is sent as a ``session.update`` to every session the key
opens; minting must refuse what that update would refuse, with the same code,
message and param, and show the session object the update would give. (Before
the session object was typed, minting checked the dict by hand and took wrong
types the session then refused: ``temperature: "hot"`` made a key that could
open no session.)
"""

from __future__ import annotations

import json

import pytest

from livegen.errors import RemoteProtocolError
from livegen.runtime.voice.engine import configured_session
from livegen.server.http.client_secrets import ClientSecrets
from protocol.session_update_cases import CASES, outcome

SINGLE = sorted(name for name, updates in CASES.items() if len(updates) == 1)


def _minted(session: object) -> dict[str, object]:
    try:
        shown = configured_session(json.loads(json.dumps(session)), "m", "sess_table")
    except RemoteProtocolError as error:
        return {"error": [error.code, error.message, error.param]}
    return {"session": shown}


@pytest.mark.parametrize("name", SINGLE)
def test_minting_checks_the_session_as_its_session_update_would(name: str) -> None:
    [session] = CASES[name]
    if not isinstance(session, dict):  # not an object: the mint route's own refusal
        assert _minted(session)["error"] == ["invalid_value", "session must be an object", "session"]
        return
    assert _minted(session) == outcome([session])


def test_a_session_that_would_be_refused_makes_no_key() -> None:
    assert _minted({"temperature": "hot"})["error"][:2] == [
        "invalid_type",
        "Invalid type for 'session.temperature': expected a number, but got a string instead.",
    ]


def test_a_key_opens_sessions_with_its_session_as_a_typed_update() -> None:
    store = ClientSecrets(clock=lambda: 0.0)
    key, _ = store.mint({"instructions": "be brief", "audio": {"input": {"turn_detection": None}}}, 60)
    update = store.bound_update(key)
    assert update is not None
    assert update.session.instructions == "be brief"
    assert (
        update.session.audio
        and update.session.audio.input
        and update.session.audio.input.turn_detection is None
    )
