"""Function tools in the voice core: definitions, calls as Realtime events, the call ledger,
out-of-band responses and usage (sans-IO: the session object, no server)."""

from __future__ import annotations

from typing import Any

import pytest

from livegen.errors import RemoteProtocolError
from livegen.models.voice import OutputKind, ResponseRequest, Usage, VoiceOutput
from livegen.protocol import realtime as wire
from livegen.voice.chain import Run, Send
from livegen.voice.session import Session
from voice.drive import drive
from voice.test_session_playback import RATE, events, new_session

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def refused(session: Session, event: wire.ClientEvent) -> RemoteProtocolError:
    with pytest.raises(RemoteProtocolError) as caught:
        drive(session.receive, event, 0.0)
    return caught.value


def request_of(effects: list[Any]) -> ResponseRequest:
    [run] = [e for e in effects if isinstance(e, Run) and e.attempt.request is not None]
    request = run.attempt.request
    assert request is not None
    return request


def with_tools(**session: Any) -> Session:
    s = new_session()
    drive(s.receive, wire.session_update({"tools": [WEATHER], **session}), 0.0)
    return s


def call(session: Session, call_id: str = "call_1", now: float = 0.0, **fields: Any) -> list[Any]:
    response = session.response
    assert response is not None
    output = VoiceOutput(
        OutputKind.FUNCTION_CALL,
        session.epoch,
        response.id,
        text='{"city": "Paris"}',
        call_id=call_id,
        name="get_weather",
        **fields,
    )
    return drive(session.on_output, output, now)


def done(session: Session, now: float = 0.0, **fields: Any) -> list[Any]:
    response = session.response
    assert response is not None
    return drive(
        session.on_output, VoiceOutput(OutputKind.RESPONSE_DONE, session.epoch, response.id, **fields), now
    )


def output_item(call_id: str, output: str = '{"sky": "clear"}') -> wire.ItemCreate:
    return wire.ItemCreate(
        item={"type": "function_call_output", "call_id": call_id, "output": output}, event_id="evt_out"
    )


# --- definitions -----------------------------------------------------------------------


def test_tools_and_tool_choice_are_kept_and_shown() -> None:
    s = new_session()
    choice = {"type": "function", "name": "get_weather"}
    effects = drive(s.receive, wire.session_update({"tools": [WEATHER], "tool_choice": choice}), 0.0)
    shown = events(effects, "session.updated")[0]["session"]
    assert shown["tools"] == [WEATHER] and shown["tool_choice"] == choice
    request = request_of(drive(s.receive, wire.ResponseCreate(), 0.0))
    assert request.tools == (
        {"type": "function", "function": {k: WEATHER[k] for k in ("name", "description", "parameters")}},
    )
    assert request.tool_choice == {"type": "function", "function": {"name": "get_weather"}}


@pytest.mark.parametrize(
    ("tools", "code", "param"),
    [
        # Not a list: a wrong type, refused as the update is decoded (as it always was on the wire).
        ("get_weather", "invalid_type", "session.tools"),
        ([{**WEATHER, "type": "code_interpreter"}], "invalid_value", "session.tools[0].type"),
        # An MCP tool is a remote server's (tests/voice/test_mcp_tools.py): it needs a server_label.
        ([{**WEATHER, "type": "mcp"}], "invalid_value", "session.tools[0].server_label"),
        ([{**WEATHER, "name": "get weather"}], "invalid_value", "session.tools[0].name"),
        ([{**WEATHER, "description": 3}], "invalid_value", "session.tools[0].description"),
        ([{**WEATHER, "parameters": {"type": "string"}}], "invalid_value", "session.tools[0].parameters"),
        ([{**WEATHER, "parameters": []}], "invalid_value", "session.tools[0].parameters"),
        ([WEATHER, WEATHER], "invalid_value", "session.tools[1].name"),
    ],
)
def test_a_bad_tool_is_refused_with_its_param(tools: Any, code: str, param: str) -> None:
    s = new_session()
    before = s.config
    with pytest.raises(RemoteProtocolError) as caught:
        drive(s.receive, wire.session_update({"tools": tools}), 0.0)
    assert (caught.value.code, caught.value.param) == (code, param)
    assert s.config == before


@pytest.mark.parametrize(
    ("choice", "param"),
    [
        ("sometimes", "session.tool_choice"),
        ({"type": "function", "name": "nope"}, "session.tool_choice.name"),
    ],
)
def test_a_bad_tool_choice_is_refused(choice: Any, param: str) -> None:
    error = refused(with_tools(), wire.session_update({"tool_choice": choice}))
    assert (error.code, error.param) == ("invalid_value", param)


def test_per_response_tools_and_none_choice() -> None:
    s = with_tools()
    request = request_of(drive(s.receive, wire.ResponseCreate(response={"tool_choice": "none"}), 0.0))
    assert request.tools == ()
    done(s)
    other = {**WEATHER, "name": "get_time"}
    request = request_of(drive(s.receive, wire.ResponseCreate(response={"tools": [other]}), 0.0))
    assert [t["function"]["name"] for t in request.tools] == ["get_time"]
    done(s)
    error = refused(s, wire.ResponseCreate(response={"tools": [{"type": "function"}]}))
    assert error.param == "response.tools[0].name"


# --- calls on the wire -------------------------------------------------------------------


def test_parallel_calls_and_text_in_one_response() -> None:
    s = with_tools()
    drive(s.receive, wire.ResponseCreate(response={"output_modalities": ["text"]}), 0.0)
    rid = s.response.id if s.response else ""
    effects = drive(s.on_output, VoiceOutput(OutputKind.TEXT_DELTA, 0, rid, text="Let me look."), 0.0)
    effects += call(s, "call_a") + call(s, "call_b")
    effects += done(s)
    kinds = [e.type for e in effects if hasattr(e, "type")]
    assert kinds.count("response.function_call_arguments.done") == 2
    args = events(effects, "response.function_call_arguments.done")
    assert [(a["call_id"], a["name"], a["output_index"]) for a in args] == [
        ("call_a", "get_weather", 1),
        ("call_b", "get_weather", 2),
    ]
    assert args[0]["arguments"] == '{"city": "Paris"}'
    deltas = events(effects, "response.function_call_arguments.delta")
    assert "".join(d["delta"] for d in deltas if d["call_id"] == "call_a") == '{"city": "Paris"}'
    added = events(effects, "response.output_item.added")
    assert [a["item"]["type"] for a in added] == ["message", "function_call", "function_call"]
    [final] = events(effects, "response.done")
    output = final["response"]["output"]
    assert [o["type"] for o in output] == ["message", "function_call", "function_call"]
    assert output[1]["call_id"] == "call_a" and output[1]["status"] == "completed"
    assert sorted(s.calls.pending()) == ["call_a", "call_b"]


def test_outputs_answer_calls_in_any_order_and_reach_the_history() -> None:
    s = with_tools()
    drive(s.receive, wire.ResponseCreate(), 0.0)
    call(s, "call_a")
    call(s, "call_b")
    done(s)
    drive(s.receive, output_item("call_b", "b"), 0.0)
    history = request_of(
        drive(s.receive, wire.ResponseCreate(), 0.0)
    ).history  # call_a still pending: left out
    assert [(t.kind, t.call_id) for t in history] == [
        ("function_call", "call_b"),
        ("function_call_output", "call_b"),
    ]
    done(s)
    drive(s.receive, output_item("call_a", "a"), 0.0)
    history = request_of(drive(s.receive, wire.ResponseCreate(), 0.0)).history
    assert [(t.kind, t.call_id, t.text) for t in history] == [
        ("function_call", "call_a", '{"city": "Paris"}'),
        ("function_call", "call_b", '{"city": "Paris"}'),
        ("function_call_output", "call_b", "b"),
        ("function_call_output", "call_a", "a"),
    ]


@pytest.mark.parametrize("call_id", ["call_unknown", "call_1"])
def test_unknown_and_duplicate_outputs_are_refused_and_change_nothing(call_id: str) -> None:
    s = with_tools()
    drive(s.receive, wire.ResponseCreate(), 0.0)
    call(s, "call_1")
    done(s)
    drive(s.receive, output_item("call_1"), 0.0)
    items = len(s.conversation)
    error = refused(s, output_item(call_id, "again"))
    expected = "unknown_call_id" if call_id == "call_unknown" else "duplicate_function_call_output"
    assert (error.code, error.param, error.event_id) == (expected, "item.call_id", "evt_out")
    assert len(s.conversation) == items
    outputs = [i for i in s.conversation.items() if i.type == "function_call_output"]
    assert [i.text for i in outputs] == ['{"sky": "clear"}']


def test_a_barge_in_abandons_the_call_and_its_late_output_is_refused() -> None:
    s = with_tools()
    drive(s.receive, wire.ResponseCreate(), 0.0)
    rid = s.response.id if s.response else ""
    drive(s.on_output, VoiceOutput(OutputKind.TEXT_DELTA, 0, rid, text="Checking the weather."), 0.0)
    drive(s.on_output, VoiceOutput(OutputKind.AUDIO_DELTA, 0, rid, audio=bytes(RATE * 2)), 0.0)  # 1 s
    call(s, "call_1")
    drive(s.tick, 0.1)
    drive(s.receive, wire.OutputAudioClear(), 0.3)  # the user talks over the answer
    error = refused(s, output_item("call_1"))
    assert error.code == "function_call_abandoned"
    assert request_of(drive(s.receive, wire.ResponseCreate(), 0.4)).history[-1].kind == "message"


def test_a_client_created_call_and_its_output() -> None:
    s = with_tools()
    item = {"type": "function_call", "call_id": "c9", "name": "get_weather", "arguments": "{}"}
    drive(s.receive, wire.ItemCreate(item=item), 0.0)
    assert refused(s, wire.ItemCreate(item=item)).param == "item.call_id"
    drive(s.receive, output_item("c9"), 0.0)
    assert [t.kind for t in request_of(drive(s.receive, wire.ResponseCreate(), 0.0)).history] == [
        "function_call",
        "function_call_output",
    ]


# --- out-of-band responses and usage -------------------------------------------------


def test_an_out_of_band_response_leaves_the_conversation_unchanged() -> None:
    s = with_tools()
    drive(
        s.receive,
        wire.ItemCreate(
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
        ),
        0.0,
    )
    before = [i.to_wire() for i in s.conversation.items()]
    body = {
        "conversation": "none",
        "output_modalities": ["text"],
        "instructions": "Classify the sentiment.",
        "metadata": {"purpose": "classify"},
        "input": [
            {"type": "item_reference", "id": before[0]["id"]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "I love it"}]},
        ],
    }
    effects = drive(s.receive, wire.ResponseCreate(response=body), 0.0)
    request = request_of(effects)
    assert [t.text for t in request.history] == ["hi", "I love it"]
    assert request.instructions == "Classify the sentiment." and request.modalities == ("text",)
    rid = s.response.id if s.response else ""
    effects = drive(s.on_output, VoiceOutput(OutputKind.TEXT_DELTA, 0, rid, text="positive"), 0.0) + done(s)
    assert not events(effects, "conversation.item.added") and not events(effects, "conversation.item.done")
    [final] = events(effects, "response.done")
    assert final["response"]["conversation_id"] is None
    assert final["response"]["metadata"] == {"purpose": "classify"}
    assert final["response"]["output"][0]["content"][0]["text"] == "positive"
    assert [i.to_wire() for i in s.conversation.items()] == before


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"conversation": "other"}, "response.conversation"),
        ({"input": [{"type": "item_reference", "id": "nope"}]}, "response.input[0].id"),
        ({"max_output_tokens": 0}, "response.max_output_tokens"),
    ],
)
def test_bad_response_options_are_refused(body: dict[str, Any], param: str) -> None:
    s = new_session()
    assert refused(s, wire.ResponseCreate(response=body)).param == param
    assert s.response is None


def test_max_output_tokens_ends_incomplete_with_its_reason() -> None:
    s = new_session()
    request = request_of(drive(s.receive, wire.ResponseCreate(response={"max_output_tokens": 5}), 0.0))
    assert request.max_output_tokens == 5
    [final] = events(done(s, status="incomplete", code="max_output_tokens"), "response.done")
    assert final["response"]["status"] == "incomplete"
    assert final["response"]["status_details"] == {"type": "incomplete", "reason": "max_output_tokens"}
    assert final["response"]["max_output_tokens"] == 5


def test_usage_is_the_models_when_reported_else_counted_words() -> None:
    s = new_session()
    drive(s.receive, wire.ResponseCreate(), 0.0)
    [final] = events(done(s, usage=Usage(120, 30, 64)), "response.done")
    usage = final["response"]["usage"]
    assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]) == (120, 30, 150)
    assert usage["input_token_details"]["cached_tokens"] == 64
    assert usage["input_token_details"]["audio_tokens"] == usage["output_token_details"]["audio_tokens"] == 0
    drive(
        s.receive,
        wire.ResponseCreate(response={"instructions": "one two three", "output_modalities": ["text"]}),
        0.0,
    )
    rid = s.response.id if s.response else ""
    effects = drive(s.on_output, VoiceOutput(OutputKind.TEXT_DELTA, 0, rid, text="four five"), 0.0) + done(s)
    usage = events(effects, "response.done")[0]["response"]["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (3, 2)


def test_beta_clients_get_the_call_events_under_beta_names() -> None:
    from livegen.protocol.realtime.beta import to_beta
    from livegen.protocol.realtime.server import as_dict

    s = with_tools()
    drive(s.receive, wire.ResponseCreate(), 0.0)
    effects = call(s, "call_1") + done(s)
    beta = [as_dict(to_beta(e.event)) for e in effects if isinstance(e, Send)]
    kinds = [e["type"] for e in beta]
    assert "conversation.item.created" in kinds and "conversation.item.added" not in kinds
    assert kinds.count("response.function_call_arguments.done") == 1
    [final] = [e for e in beta if e["type"] == "response.done"]
    assert final["response"]["output"][0]["call_id"] == "call_1"
