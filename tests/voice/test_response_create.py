"""``response.create``'s own fields: null instructions, and metadata echoed on the response.

LiveKit's plugin sends ``response: {"instructions": null, "metadata":
{"client_event_id": ...}}`` with every reply and finds its reply by that
metadata in ``response.created``: a refusal of the null, or a response
without the metadata, leaves its ``generate_reply`` waiting until it times out.
"""

from __future__ import annotations

from typing import Any

import pytest

from livegen.errors import RemoteProtocolError
from livegen.models.voice import OutputKind, VoiceOutput
from livegen.protocol import realtime as wire
from voice.drive import drive
from voice.test_session_playback import events, new_session


def created_and_done(overrides: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    session = new_session()
    created = events(drive(session.receive, wire.ResponseCreate(response=overrides), 0.0), "response.created")
    response = session.response
    assert response is not None
    done = drive(
        session.on_output, VoiceOutput(OutputKind.RESPONSE_DONE, 0, response.id, status="completed"), 0.1
    )
    return created[0]["response"], events(done, "response.done")[0]["response"]


def test_null_instructions_mean_the_sessions_own() -> None:
    created, _ = created_and_done({"instructions": None})
    assert created["status"] == "in_progress"


def test_metadata_is_echoed_on_created_and_done() -> None:
    metadata = {"client_event_id": "evt_7"}
    created, done = created_and_done({"instructions": None, "metadata": metadata})
    assert created["metadata"] == metadata and done["metadata"] == metadata


def test_no_metadata_is_null() -> None:
    created, done = created_and_done({})
    assert created["metadata"] is None and done["metadata"] is None


@pytest.mark.parametrize(
    "metadata",
    [["a"], {"k": 1}, {f"k{i}": "v" for i in range(17)}, {"k" * 65: "v"}, {"k": "v" * 513}],
)
def test_metadata_out_of_openais_bounds_is_refused(metadata: Any) -> None:
    session = new_session()
    with pytest.raises(RemoteProtocolError) as refused:
        drive(session.receive, wire.ResponseCreate(response={"metadata": metadata}), 0.0)
    assert refused.value.code == "invalid_value" and refused.value.param == "response.metadata"
    assert session.response is None


def test_instructions_of_the_wrong_type_are_still_refused() -> None:
    session = new_session()
    with pytest.raises(RemoteProtocolError) as refused:
        drive(session.receive, wire.ResponseCreate(response={"instructions": 3}), 0.0)
    assert refused.value.param == "response.instructions"


def test_an_unknown_reasoning_effort_is_refused_by_name_and_no_response_starts() -> None:
    session = new_session()
    with pytest.raises(RemoteProtocolError) as refused:
        drive(session.receive, wire.ResponseCreate(response={"reasoning": {"effort": "maximal"}}), 0.0)
    assert (refused.value.code, refused.value.param) == ("invalid_value", "response.reasoning.effort")
    assert "'maximal'" in refused.value.message and "'xhigh'" in refused.value.message
    assert session.response is None
    created, _ = created_and_done({"reasoning": {"effort": "high"}})
    assert created["status"] == "in_progress"
