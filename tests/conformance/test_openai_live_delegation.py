"""GPT-Live client delegation through the official ``openai`` SDK (``client.live.connect``), unchanged.

The cascade answers with a scripted OpenAI-compatible chat endpoint on
loopback (``ChatServer``, a test double of a language model, the way
tests/models/cascade/test_tools.py drives tool calls): its first answer calls
the delegation tool the dialect offers, which reaches the client as
``session.delegation.created``; the client answers with a
``session.commentary.append`` naming the delegation, and the model speaks from
that result. Every event livegen sends is validated by the SDK's own
``ServerEvent`` adapter (the recorder of test_openai_live.py). An answer to an
unknown delegation, or a second answer, gets an error and the session goes on.
"""

from __future__ import annotations

import json
from typing import Any

from conformance.support import until
from conformance.test_openai_live import START, Live, conformance, connect, started
from livegen.protocol.live.delegation import DELEGATE_NAME
from livegen.server.thread import ServerThread
from models.cascade.support import ChatServer, Reply

TASK = '{"task": "Find where order 42 is."}'
RESULT = "Order 42 left the warehouse and arrives on Tuesday."


async def delegation(live: Live, chat: ChatServer, speech: Any) -> str:
    """A spoken request the language model delegates: the id of the delegation the client is told of."""
    chat.replies = [
        Reply(("Let me check on that.",), (("call_d1", DELEGATE_NAME, TASK),)),
        Reply(("Good news: your order arrives on Tuesday.",)),
    ]
    live.listen().say(speech("Where is my order?"))
    created = (await until(lambda: live.of("session.delegation.created"), 90, "the delegation"))[0]
    return str(created["delegation"]["id"])


@conformance("live-client-delegation")
async def test_a_client_delegated_task_is_answered_by_commentary_and_its_result_is_spoken(
    llm_server: ServerThread, chat: ChatServer, speech: Any
) -> None:
    async with connect(llm_server, START) as live:
        await started(live)
        delegation_id = await delegation(live, chat, speech)
        [created] = live.of("session.delegation.created")
        assert created["delegation"]["target"] == "client" and created["delegation"]["type"] == "delegation"
        assert created["offset_ms"] > 0  # on the session's timeline, after the request was heard
        answer = {"type": "session.commentary.append", "event_id": "answer_1", "content": RESULT}
        await live.connection.send({**answer, "delegation_id": delegation_id})
        await until(
            lambda: "Tuesday" in live.text("session.output_transcript.delta"), 90, "the result spoken"
        )
        assert live.of("session.commentary.appended")[0]["client_event_id"] == "answer_1"
        assert not live.of("error")
    # The model was given the client's result as its call's output, and spoke from it.
    offered = [tool["function"]["name"] for tool in chat.requests[0]["tools"]]
    assert offered == [DELEGATE_NAME]
    tool = chat.requests[-1]["messages"][-1]
    assert tool == {"role": "tool", "tool_call_id": "call_d1", "content": RESULT}


@conformance("live-errors")
async def test_an_unknown_delegation_and_a_second_answer_are_refused_and_the_session_goes_on(
    llm_server: ServerThread, chat: ChatServer, speech: Any
) -> None:
    async with connect(llm_server, START) as live:
        await started(live)
        delegation_id = await delegation(live, chat, speech)
        sends = [("stray_1", "deleg_unknown"), ("answer_1", delegation_id), ("again_1", delegation_id)]
        for event_id, target in sends:
            await live.connection.send(
                {
                    "type": "session.commentary.append",
                    "event_id": event_id,
                    "content": RESULT,
                    "delegation_id": target,
                }
            )
        await until(lambda: len(live.of("error")) == 2, 30, "two refusals")
        errors = {e["error"]["client_event_id"]: e["error"] for e in live.of("error")}
        assert errors["stray_1"]["code"] == "unknown_delegation_id"
        assert errors["stray_1"]["param"] == "delegation_id"
        assert errors["again_1"]["code"] == "delegation_already_answered"
        await until(
            lambda: "Tuesday" in live.text("session.output_transcript.delta"), 90, "the one answer spoken"
        )
        await live.connection.send({"type": "session.input_audio.mute", "event_id": "mute_1"})
        await until(lambda: live.of("session.input_audio.muted"), 30, "the session goes on")
    outputs = [m for r in chat.requests for m in r["messages"] if m["role"] == "tool"]
    assert json.dumps(outputs).count(RESULT) == 1  # the refused answers reached no model


@conformance("live-responses-delegation")
async def test_a_responses_delegated_task_runs_on_the_served_language_model_and_its_result_is_spoken(
    llm_server: ServerThread, chat: ChatServer, speech: Any
) -> None:
    backend = {"model": "tiny", "instructions": "You look orders up."}
    session = {**START, "delegation": {"type": "responses", "responses": backend}}
    async with connect(llm_server, session) as live:
        await started(live)
        chat.replies = [
            Reply(("Let me check on that.",), (("call_d1", DELEGATE_NAME, TASK),)),
            Reply((RESULT,)),  # the delegated task, run out of band
            Reply(("Good news: your order arrives on Tuesday.",)),
        ]
        live.listen().say(speech("Where is my order?"))
        created = (await until(lambda: live.of("session.delegation.created"), 90, "the delegation"))[0]
        assert created["delegation"]["target"] == "responses"
        await until(
            lambda: "Tuesday" in live.text("session.output_transcript.delta"), 90, "the result spoken"
        )
        lifecycle = [(e["event"]["type"], e["delegation_id"]) for e in live.of("response.event")]
        delegation_id = created["delegation"]["id"]
        assert lifecycle == [("response.created", delegation_id), ("response.completed", delegation_id)]
        assert not live.of("error")
    # The task ran with the delegation's instructions and the task as its input, and no tools.
    task_request = chat.requests[1]
    assert task_request["messages"][0] == {"role": "system", "content": "You look orders up."}
    assert "Find where order 42 is." in json.dumps(task_request["messages"][1:])
    assert not task_request.get("tools")
    tool = chat.requests[-1]["messages"][-1]
    assert tool == {"role": "tool", "tool_call_id": "call_d1", "content": RESULT}
