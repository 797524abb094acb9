"""The GPT-Live dialect and its output timeline, sans-IO (``protocol/live/``)."""

from __future__ import annotations

import base64
import json

import pytest

from livegen.errors import RemoteProtocolError
from livegen.protocol.live import events as live
from livegen.protocol.live.delegation import DELEGATE, DELEGATE_NAME
from livegen.protocol.live.dialect import MAX_APPEND_TOKENS, LiveDialect, Step
from livegen.protocol.live.timeline import OutputTimeline


def started(native: bool = False, delegates: bool = False, **session: object) -> LiveDialect:
    return opened(native, delegates, **session)[0]


def opened(native: bool = False, delegates: bool = False, **session: object) -> tuple[LiveDialect, Step]:
    """A started dialect, and what its start sent the session (the ``session.update`` first)."""
    dialect = LiveDialect("sess_1", native=native, delegates=delegates)
    start = live.decode(json.dumps({"type": "session.start", "session": {"model": "gpt-live-1", **session}}))
    assert isinstance(start, live.SessionStart)
    return dialect, dialect.start(start, 0)


def offered(delegates: bool = False, **session: object) -> object:
    """The tools the start's ``session.update`` offers the model (None: none)."""
    return opened(False, delegates, **session)[1].to_session[0]["session"].get("tools")


def event(**fields: object) -> live.ClientEvent:
    return live.decode(json.dumps(fields))


def test_an_unknown_field_anywhere_is_openais_unknown_parameter() -> None:
    with pytest.raises(RemoteProtocolError) as refused:
        live.decode(
            json.dumps(
                {"type": "session.start", "session": {"model": "m", "audio": {"output": {"speed": 2}}}}
            )
        )
    assert (refused.value.code, refused.value.param) == ("unknown_parameter", "session.audio.output.speed")
    assert str(refused.value) == "Unknown parameter: 'session.audio.output.speed'."


def test_append_events_take_a_null_delegation_id() -> None:
    append = event(type="session.commentary.append", content="Hello.", delegation_id=None)
    assert isinstance(append, live.CommentaryAppend) and append.delegation_id is None


def test_muted_audio_reaches_the_session_as_silence_of_the_same_length() -> None:
    dialect = started()
    dialect.inbound(event(type="session.input_audio.mute"))
    speech = base64.b64encode(b"\x01\x02" * 2400).decode()  # 100 ms at 24 kHz
    [append] = dialect.inbound(event(type="session.input_audio.append", audio=speech)).to_session
    assert base64.b64decode(append["audio"]) == bytes(4800)
    assert dialect.input_ms == 100  # the session's clock goes on
    dialect.inbound(event(type="session.input_audio.unmute"))
    [append] = dialect.inbound(event(type="session.input_audio.append", audio=speech)).to_session
    assert append["audio"] == speech


def test_commentary_makes_the_model_speak_and_is_acknowledged_on_the_timeline() -> None:
    dialect = started()
    dialect.input_ms = 1200
    step = dialect.inbound(event(type="session.commentary.append", event_id="c1", content="Greet them."))
    assert [e["type"] for e in step.to_session] == ["conversation.item.create", "response.create"]
    [ack] = step.to_client
    assert isinstance(ack, live.CommentaryAppended) and (ack.client_event_id, ack.start_ms) == ("c1", 1200)


def test_an_append_over_the_bound_is_refused_and_changes_nothing() -> None:
    dialect = started(instructions="Base.")
    with pytest.raises(RemoteProtocolError) as refused:
        dialect.inbound(event(type="session.instructions.append", content="word " * MAX_APPEND_TOKENS))
    assert refused.value.code == "append_too_long"
    assert dialect.instructions == "Base."


def test_an_event_after_close_is_refused() -> None:
    dialect = started()
    assert dialect.inbound(event(type="session.close")).close
    with pytest.raises(RemoteProtocolError) as refused:
        dialect.inbound(event(type="session.input_audio.mute", event_id="late"))
    assert (refused.value.code, refused.value.event_id) == ("session_closed", "late")


def test_a_native_model_is_not_asked_for_what_it_cannot_do() -> None:
    with pytest.raises(RemoteProtocolError) as refused:
        started(native=True, instructions="Be brief.")
    assert refused.value.param == "session.instructions"
    dialect = LiveDialect("sess_1", native=True)
    start = event(type="session.start", session={"model": "gpt-live-1"})
    assert isinstance(start, live.SessionStart)
    [update] = dialect.start(start, 0).to_session
    assert (
        "transcription" not in update["session"]["audio"]["input"] and "instructions" not in update["session"]
    )


def test_the_output_stream_is_gapless_and_places_each_piece_where_its_speech_starts() -> None:
    timeline = OutputTimeline(bytes_per_ms=48)
    frames = timeline.frames(80)  # silence before the model speaks
    timeline.push_text("Hello")  # the transcript comes before its audio: it waits for it
    frames += timeline.frames(120)
    assert frames[-1].delta == frames[0].delta  # a silent frame: nothing is said yet
    timeline.push_audio(b"\x01" * 48 * 100)
    frames += timeline.frames(400)
    audio = [f for f in frames if isinstance(f, live.OutputAudioDelta)]
    assert [f.start_ms for f in audio] == list(range(0, 360, 40))  # silence: a frame less ahead
    [piece] = [f for f in frames if isinstance(f, live.OutputTranscriptDelta)]
    assert (piece.start_ms, piece.end_ms) == (80, 180)


def test_speech_made_in_a_silence_leaves_at_once() -> None:
    timeline = OutputTimeline(bytes_per_ms=48)
    assert timeline.frames(200)[-1].start_ms == 120  # silence is sent a frame short of the lead
    assert timeline.frames(200) == []
    timeline.push_audio(b"\x01" * 48 * 40)
    [speech] = timeline.frames(200)  # the same moment: the speech does not wait for the clock
    assert isinstance(speech, live.OutputAudioDelta) and speech.start_ms == 160


def test_a_barge_in_drops_what_was_not_sent() -> None:
    timeline = OutputTimeline(bytes_per_ms=48)
    timeline.push_audio(b"\x01" * 48 * 1000)
    timeline.frames(200)
    assert timeline.clear() == 800
    assert not any(
        any(base64.b64decode(f.delta)) for f in timeline.frames(400) if isinstance(f, live.OutputAudioDelta)
    )


def test_commentary_while_the_model_speaks_is_no_error_to_the_client() -> None:
    dialect = started()
    step = dialect.inbound(event(type="session.commentary.append", content="Mention the weather."))
    [create] = [e for e in step.to_session if e["type"] == "response.create"]
    busy = {
        "code": "conversation_already_has_active_response",
        "message": "busy",
        "event_id": create["event_id"],
    }
    assert dialect.outbound({"type": "error", "error": busy}) == []
    other = {"code": "invalid_value", "message": "bad", "event_id": "client_1"}
    [error] = dialect.outbound({"type": "error", "error": other})
    assert isinstance(error, live.Error) and error.error["client_event_id"] == "client_1"


def busy_refusal(dialect: LiveDialect, step: Step) -> None:
    """The session refuses ``step``'s response as busy (another is under way)."""
    [create] = [e for e in step.to_session if e["type"] == "response.create"]
    busy = {"code": "conversation_already_has_active_response", "message": "busy"}
    assert dialect.outbound({"type": "error", "error": {**busy, "event_id": create["event_id"]}}) == []


def test_a_refused_commentary_response_is_asked_for_once_the_one_under_way_ends() -> None:
    dialect = started()
    busy_refusal(dialect, dialect.inbound(event(type="session.commentary.append", content="Hi.")))
    assert dialect.take_requests() == []  # nothing while the model speaks
    assert dialect.outbound({"type": "response.done", "response": {"status": "completed"}}) == []
    [owed] = dialect.take_requests()
    assert owed["type"] == "response.create"
    assert dialect.take_requests() == []  # asked for once
    assert dialect.outbound({"type": "response.done", "response": {"status": "completed"}}) == []
    assert dialect.take_requests() == []


def test_a_response_that_starts_first_takes_what_was_owed() -> None:
    dialect = started()
    busy_refusal(dialect, dialect.inbound(event(type="session.commentary.append", content="Hi.")))
    dialect.outbound({"type": "response.created", "response": {"id": "resp_2"}})
    dialect.outbound({"type": "response.done", "response": {"status": "completed"}})
    assert dialect.take_requests() == []  # resp_2 heard the commentary: no second response


# --- client delegation -----------------------------------------------------------------
def delegated(dialect: LiveDialect, call_id: str = "call_1") -> str:
    """The language model calls the delegation tool: the client is told, and the id returned."""
    done = {"type": "response.function_call_arguments.done", "call_id": call_id, "name": DELEGATE_NAME}
    [created] = dialect.outbound({**done, "arguments": '{"task": "track the order"}'})
    assert isinstance(created, live.DelegationCreated)
    return created.delegation.id


def test_a_model_that_can_call_tools_is_offered_the_delegation_tool_under_client_or_responses() -> None:
    assert offered(delegates=True) == [DELEGATE]  # delegation omitted: the client's
    assert offered(delegates=True, delegation={"type": "client"}) == [DELEGATE]
    assert offered(delegates=True, delegation={"type": "responses", "responses": {"model": "m"}}) == [
        DELEGATE
    ]
    assert offered() is None  # the built-in responder cannot call a tool


def test_the_tool_call_is_a_delegation_and_its_commentary_answer_is_the_calls_output() -> None:
    dialect = started(delegates=True)
    dialect.input_ms = 2400
    done = {"type": "response.function_call_arguments.done", "call_id": "call_7", "name": DELEGATE_NAME}
    [created] = dialect.outbound({**done, "arguments": "{}"})
    assert isinstance(created, live.DelegationCreated)
    assert (created.delegation.target, created.delegation.type, created.offset_ms) == (
        "client",
        "delegation",
        2400,
    )
    answer = {"type": "session.commentary.append", "event_id": "a1", "content": "It ships Tuesday."}
    step = dialect.inbound(event(**answer, delegation_id=created.delegation.id))
    item = {"type": "function_call_output", "call_id": "call_7", "output": "It ships Tuesday."}
    assert step.to_session[0] == {"type": "conversation.item.create", "item": item, "event_id": "a1"}
    assert step.to_session[1]["type"] == "response.create"
    assert [type(e) for e in step.to_client] == [live.CommentaryAppended]


def test_another_function_call_is_no_delegation() -> None:
    done = {"type": "response.function_call_arguments.done", "call_id": "c", "name": "get_weather"}
    assert started(delegates=True).outbound(done) == []


def test_a_delegations_result_given_while_the_model_speaks_is_spoken_after() -> None:
    dialect = started(delegates=True)
    delegation_id = delegated(dialect)
    answer = event(type="session.commentary.append", content="Tuesday.", delegation_id=delegation_id)
    step = dialect.inbound(answer)
    assert step.to_session[0]["item"]["type"] == "function_call_output"  # taken at once
    busy_refusal(dialect, step)
    dialect.outbound({"type": "response.done", "response": {"status": "completed"}})
    assert [r["type"] for r in dialect.take_requests()] == ["response.create"]


def test_an_unknown_delegation_id_and_a_second_answer_are_refused_and_change_nothing() -> None:
    dialect = started(delegates=True)
    with pytest.raises(RemoteProtocolError) as unknown:
        dialect.inbound(event(type="session.commentary.append", content="x", delegation_id="deleg_nope"))
    assert (unknown.value.code, unknown.value.param) == ("unknown_delegation_id", "delegation_id")
    with pytest.raises(RemoteProtocolError):
        dialect.inbound(event(type="session.thinking.append", content="x", delegation_id="deleg_nope"))
    delegation_id = delegated(dialect)
    dialect.inbound(event(type="session.thinking.append", content="looking", delegation_id=delegation_id))
    dialect.inbound(event(type="session.commentary.append", content="Done.", delegation_id=delegation_id))
    with pytest.raises(RemoteProtocolError) as again:
        dialect.inbound(
            event(type="session.commentary.append", content="Again.", delegation_id=delegation_id)
        )
    assert again.value.code == "delegation_already_answered"
    # A later delegation is answered as the first was.
    later = delegated(dialect, "call_2")
    assert later != delegation_id
    step = dialect.inbound(event(type="session.commentary.append", content="Yes.", delegation_id=later))
    assert step.to_session[0]["item"]["call_id"] == "call_2"


def test_a_delegation_id_under_responses_delegation_is_refused() -> None:
    dialect = started(delegates=True, delegation={"type": "responses", "responses": {"model": "m"}})
    with pytest.raises(RemoteProtocolError) as refused:
        dialect.inbound(event(type="session.commentary.append", content="x", delegation_id="deleg_1"))
    assert (refused.value.code, refused.value.param) == ("unsupported_parameter", "delegation_id")


def test_a_responses_delegation_runs_out_of_band_and_its_text_is_the_calls_output() -> None:
    responses = {"model": "m", "instructions": "Look orders up."}
    dialect = started(delegates=True, delegation={"type": "responses", "responses": responses})
    done = {"type": "response.function_call_arguments.done", "call_id": "call_1", "name": DELEGATE_NAME}
    [created] = dialect.outbound({**done, "arguments": '{"task": "Find order 42."}'})
    assert isinstance(created, live.DelegationCreated) and created.delegation.target == "responses"
    [run] = dialect.take_requests()
    assert run["response"]["conversation"] == "none" and run["response"]["instructions"] == "Look orders up."
    assert run["response"]["input"][0]["content"][0]["text"] == "Find order 42."
    # Refused while the delegating response speaks: asked for again once it ends.
    busy = {"code": "conversation_already_has_active_response", "message": "busy"}
    assert dialect.outbound({"type": "error", "error": {**busy, "event_id": run["event_id"]}}) == []
    dialect.outbound({"type": "response.done", "response": {"status": "completed"}})
    assert dialect.take_requests() == [run]
    meta = {"delegation_id": created.delegation.id}
    [began] = dialect.outbound({"type": "response.created", "response": {"id": "r2", "metadata": meta}})
    assert isinstance(began, live.ResponseEvent) and began.event["type"] == "response.created"
    output = [{"type": "message", "content": [{"type": "output_text", "text": "It arrives Tuesday."}]}]
    finished = {"id": "r2", "status": "completed", "metadata": meta, "output": output}
    [ended] = dialect.outbound({"type": "response.done", "response": finished})
    assert isinstance(ended, live.ResponseEvent) and ended.event["type"] == "response.completed"
    assert ended.delegation_id == created.delegation.id
    answer, speak = dialect.take_requests()
    assert answer["item"] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "It arrives Tuesday.",
    }
    assert speak["type"] == "response.create"
