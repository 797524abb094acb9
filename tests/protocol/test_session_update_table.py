"""Each ``session.update`` payload ends as it was recorded: the same session object, or the same error.

``data/session_update_table.json`` was recorded (``python
tests/protocol/session_update_cases.py``) from the core that walked the session
object as a dict; the session object is now decoded into typed structs
(``protocol/realtime/fields.py``) and applied by ``voice/config.py``. Every
payload must still give the same session object, or the same refusal: code,
message and param, byte for byte.
"""

from __future__ import annotations

import json

import pytest

from livegen.errors import RemoteProtocolError
from livegen.protocol import realtime as wire
from protocol.session_update_cases import CASES, TABLE, TRANSCRIPTION_CASES, outcome

RECORDED = json.loads(TABLE.read_text())


def test_the_table_records_every_case() -> None:
    assert sorted(RECORDED) == sorted([*CASES, *TRANSCRIPTION_CASES])


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_session_update_ends_as_recorded(name: str) -> None:
    assert outcome(CASES[name]) == RECORDED[name]


@pytest.mark.parametrize("name", sorted(TRANSCRIPTION_CASES))
def test_each_transcription_session_update_ends_as_recorded(name: str) -> None:
    assert outcome(TRANSCRIPTION_CASES[name], "transcription_session.update") == RECORDED[name]


@pytest.mark.parametrize("order", ["session first", "event_id first"])
def test_a_bad_event_id_is_named_before_the_sessions_mistakes(order: str) -> None:
    # The session was checked after the event once; now both decode in one pass, event_id first.
    fields = ['"session": {"instructions": 5}', '"event_id": 5']
    body = ", ".join(fields if order == "session first" else fields[::-1])
    with pytest.raises(RemoteProtocolError) as caught:
        wire.decode('{"type": "session.update", ' + body + "}")
    assert (caught.value.code, caught.value.param) == ("invalid_type", "event_id")
