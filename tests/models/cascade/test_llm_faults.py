"""A misbehaving language model costs one response, never the session, the server or a client.

The endpoint is ``ChatServer`` on loopback, made to misbehave on demand (its
``faults``): an error status, a malformed stream, a hang, a byte-a-second
trickle, one endless line, endless call fragments, endless text, a hundred
parallel calls, ten megabytes of arguments, calls of undeclared functions,
and ids with control characters. Over the wire, through the official SDK,
each ends its response ``failed`` with a code of the error table in
``status_details.error``; another session's answer meanwhile comes (within a
generous bound, checked by its events), and the session itself answers its
next question. The client-level tests check the same faults raise the typed
error of ``chat_stream`` without a voice model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from livegen.models.cascade import llm
from livegen.server import ServerConfig
from livegen.server.thread import ServerThread
from models.cascade.support import ChatServer, RealtimeCall
from models.cascade.test_tools import agent, ask, sdk

#: Small limits, so every fault ends in a second or two (the defaults are 30 s, 300 s, MiBs).
LIMITS = {
    "llm_first_token_s": 2.0,
    "llm_answer_s": 4.0,
    "llm_max_line_kib": 64,
    "llm_max_arguments_kib": 64,
    "llm_max_text_kib": 16,
    "llm_max_tool_calls": 8,
}
#: What a fault may write at most: bounded even against code that never stops reading.
MAX_ATTACK_BYTES = 200 * 1024 * 1024
#: A generous bound on waiting for any event here (the faults end in seconds).
WITHIN_S = 60.0

Fault = Callable[[BaseHTTPRequestHandler, ChatServer], None]


# --- the faults ---------------------------------------------------------------------------------


def _head(handler: BaseHTTPRequestHandler, status: int = 200) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "text/event-stream")
    handler.end_headers()
    handler.wfile.flush()


def _chunk(finish: str | None = None, **delta: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return f"data: {json.dumps({'object': 'chat.completion.chunk', 'choices': [choice]})}\n\n".encode()


def _call(index: int, call_id: str, name: str, arguments: str) -> bytes:
    function = {"name": name, "arguments": arguments}
    return _chunk(tool_calls=[{"index": index, "id": call_id, "type": "function", "function": function}])


def _end(handler: BaseHTTPRequestHandler, finish: str) -> None:
    handler.wfile.write(_chunk(finish) + b"data: [DONE]\n\n")
    handler.wfile.flush()


def _flood(handler: BaseHTTPRequestHandler, chat: ChatServer, piece: bytes) -> None:
    """Write ``piece`` again and again, as fast as the client takes it, until it hangs up."""
    sent = 0
    while sent < MAX_ATTACK_BYTES and not chat.stopping.is_set():
        handler.wfile.write(piece)
        sent += len(piece)


def error_500(handler: BaseHTTPRequestHandler, chat: ChatServer) -> None:
    _head(handler, 500)
    handler.wfile.write(b'{"error": {"message": "the GPU caught fire"}}')


def malformed(handler: BaseHTTPRequestHandler, chat: ChatServer) -> None:
    _head(handler)
    handler.wfile.write(b"data: {this is not json\n\n")
    _end(handler, "stop")


def hang(handler: BaseHTTPRequestHandler, chat: ChatServer) -> None:
    _head(handler)
    chat.stopping.wait(WITHIN_S * 2)


def trickle(handler: BaseHTTPRequestHandler, chat: ChatServer) -> None:
    """Words at once, then a byte every 0.2 s (every read timeout met, the answer never ending)."""
    _head(handler)
    handler.wfile.write(_chunk(content="Well, "))
    handler.wfile.flush()
    while not chat.stopping.wait(0.2):
        handler.wfile.write(b"x")
        handler.wfile.flush()


def giant_line(handler: BaseHTTPRequestHandler, chat: ChatServer) -> None:
    _head(handler)
    handler.wfile.write(b'data: {"choices": [{"index": 0, "delta": {"content": "')
    _flood(handler, chat, b"x" * 65536)


def endless_fragments(handler: BaseHTTPRequestHandler, chat: ChatServer) -> None:
    _head(handler)
    handler.wfile.write(_call(0, "call_e", "get_weather", '{"city": "'))
    fragment = _chunk(tool_calls=[{"index": 0, "function": {"arguments": "aaaaaaa"}}])
    _flood(handler, chat, fragment * 1000)


def big_fragments(handler: BaseHTTPRequestHandler, chat: ChatServer) -> None:
    """Few chunks (well within max_tokens), but their arguments pass the arguments cap."""
    _head(handler)
    handler.wfile.write(_call(0, "call_b", "get_weather", '{"city": "'))
    fragment = _chunk(tool_calls=[{"index": 0, "function": {"arguments": "b" * 30_000}}])
    handler.wfile.write(fragment * 4)
    _end(handler, "tool_calls")


def big_text(handler: BaseHTTPRequestHandler, chat: ChatServer) -> None:
    """Few chunks, but their words pass the text cap."""
    _head(handler)
    handler.wfile.write(_chunk(content="Long words. " * 1000) * 3)
    _end(handler, "stop")


def comment_flood(handler: BaseHTTPRequestHandler, chat: ChatServer) -> None:
    """Words, then nothing but keep-alive comments, as fast as they are taken."""
    _head(handler)
    handler.wfile.write(_chunk(content="Well, "))
    _flood(handler, chat, b": keep-alive\n" * 5000)


def junk_flood(handler: BaseHTTPRequestHandler, chat: ChatServer) -> None:
    """Words, then long comment lines (each within the line cap), as fast as they are taken."""
    _head(handler)
    handler.wfile.write(_chunk(content="Well, "))
    _flood(handler, chat, b": " + b"j" * 60_000 + b"\n")


def endless_text(handler: BaseHTTPRequestHandler, chat: ChatServer) -> None:
    _head(handler)
    _flood(handler, chat, _chunk(content="and on ") * 1000)


def many_calls(handler: BaseHTTPRequestHandler, chat: ChatServer) -> None:
    _head(handler)
    for index in range(96):
        handler.wfile.write(_call(index, f"call_{index}", "get_weather", '{"city": "Paris"}'))
    _end(handler, "tool_calls")


def huge_arguments(handler: BaseHTTPRequestHandler, chat: ChatServer) -> None:
    _head(handler)
    handler.wfile.write(_call(0, "call_h", "get_weather", json.dumps({"city": "x" * 10_000_000})))
    _end(handler, "tool_calls")


def undeclared(handler: BaseHTTPRequestHandler, chat: ChatServer) -> None:
    _head(handler)
    handler.wfile.write(_call(0, "call_u", "delete_everything", "{}"))
    _end(handler, "tool_calls")


def long_name(handler: BaseHTTPRequestHandler, chat: ChatServer) -> None:
    _head(handler)
    handler.wfile.write(_call(0, "call_l", "get_weather" + "x" * 10_000, "{}"))
    _end(handler, "tool_calls")


def not_an_object(handler: BaseHTTPRequestHandler, chat: ChatServer) -> None:
    _head(handler)
    handler.wfile.write(_call(0, "call_n", "get_weather", "Paris, please"))
    _end(handler, "tool_calls")


def control_id(handler: BaseHTTPRequestHandler, chat: ChatServer) -> None:
    _head(handler)
    handler.wfile.write(_call(0, "call\x00\x1b[2J" + "x" * 10_000, "get_weather", '{"city": "Paris"}'))
    _end(handler, "tool_calls")


FAULTS: dict[str, tuple[Fault, str]] = {
    "error_500": (error_500, "llm_failed"),
    "malformed": (malformed, "llm_malformed_stream"),
    "hang": (hang, "llm_timeout"),
    "trickle": (trickle, "llm_timeout"),
    "giant_line": (giant_line, "llm_output_too_large"),
    "endless_fragments": (endless_fragments, "llm_output_too_large"),
    "endless_text": (endless_text, "llm_output_too_large"),
    "big_fragments": (big_fragments, "llm_output_too_large"),
    "big_text": (big_text, "llm_output_too_large"),
    "comment_flood": (comment_flood, "llm_output_too_large"),
    "junk_flood": (junk_flood, "llm_output_too_large"),
    "many_calls": (many_calls, "llm_output_too_large"),
    "huge_arguments": (huge_arguments, "llm_output_too_large"),
    "undeclared": (undeclared, "llm_invalid_tool_call"),
    "long_name": (long_name, "llm_invalid_tool_call"),
    "not_an_object": (not_an_object, "llm_invalid_tool_call"),
}
#: Faults of one kind that different caps end: the words of the error that says which.
CAPPED_BY = {
    "giant_line": "line longer than",
    "endless_fragments": "chunks in one answer",
    "many_calls": "more than 8 calls",
    "big_fragments": "bytes of arguments",
    "big_text": "bytes of text",
    "comment_flood": "lines in one answer",
    "junk_flood": "stream passed",
    "hang": "said nothing within 2 s",
    "trickle": "took longer than 4 s",
}
WEATHER_CHAT = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def _marker(name: str) -> str:
    return f"<{name}>"


# --- the client alone ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(FAULTS))
async def test_each_fault_is_its_typed_error(chat_server: ChatServer, name: str) -> None:
    from livegen.models.voice import LLMLimits  # here: llm_attacks imports this module on older code too

    fault, code = FAULTS[name]
    chat_server.faults[_marker(name)] = fault
    limits = LLMLimits(2.0, 4.0, 64 * 1024, 64 * 1024, 16 * 1024, 8)
    client = llm.Client(llm.Settings(chat_server.url, "tiny", limits=limits))
    chat = [{"role": "user", "content": f"Now {_marker(name)}"}]
    with pytest.raises(llm.LLMFailed) as raised:
        try:
            [event async for event in client.stream(chat, tools=[WEATHER_CHAT])]
        finally:
            await client.aclose()
    assert raised.value.code == code
    if name in CAPPED_BY:
        assert CAPPED_BY[name] in str(raised.value)


async def test_a_call_id_with_control_characters_is_dropped_for_the_sessions_own(
    chat_server: ChatServer,
) -> None:
    chat_server.faults[_marker("id")] = control_id
    client = llm.Client(llm.Settings(chat_server.url, "tiny"))
    try:
        events = [e async for e in client.stream([{"role": "user", "content": "<id>"}], [WEATHER_CHAT])]
    finally:
        await client.aclose()
    assert events[0] == llm.ToolCall("", "get_weather", '{"city": "Paris"}')


async def test_lines_end_with_crlf_and_comments_are_skipped(chat_server: ChatServer) -> None:
    def crlf(handler: BaseHTTPRequestHandler, chat: ChatServer) -> None:
        _head(handler)
        handler.wfile.write(b": keep-alive\r\n\r\n" + _chunk(content="Hi.").replace(b"\n", b"\r\n"))
        _end(handler, "stop")

    chat_server.faults["<crlf>"] = crlf
    client = llm.Client(llm.Settings(chat_server.url, "tiny"))
    try:
        events = [e async for e in client.stream([{"role": "user", "content": "<crlf>"}])]
    finally:
        await client.aclose()
    assert events == ["Hi.", llm.Finish("stop", None)]


# --- over the wire ------------------------------------------------------------------------------


@pytest.fixture
def faulty_server(
    start_server: Callable[..., ServerThread], cascade: Any, chat_server: ChatServer
) -> Iterator[ServerThread]:
    # On code without the limits the server runs without them, and the tests fail by their events.
    limits = {key: value for key, value in LIMITS.items() if hasattr(ServerConfig, key)}
    chat_server.reply = ["Fine, thanks."]
    server = start_server(world_model="none", llm_base_url=chat_server.url, llm_model="tiny", **limits)
    try:
        server.wait_ready(timeout=120)
        yield server
    finally:
        cascade.use_llm(None, None)  # the model is shared by every server of this process


async def _question(connection: Any, call: RealtimeCall, text: str) -> Any:
    mark = len(call.events)
    await ask(connection, text, output_modalities=["text"])
    return await call.wait_for("response.done", within=WITHIN_S, after=mark)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FAULTS))
async def test_a_fault_fails_its_response_and_nothing_else(
    faulty_server: ServerThread, chat_server: ChatServer, name: str
) -> None:
    fault, code = FAULTS[name]
    chat_server.faults[_marker(name)] = fault
    client = sdk(faulty_server)
    async with (
        client.realtime.connect(model="gpt-realtime") as victim,
        client.realtime.connect(model="gpt-realtime") as other,
    ):
        victim_call, other_call = RealtimeCall(victim), RealtimeCall(other)
        await agent(victim, victim_call)
        await agent(other, other_call)
        mark = len(victim_call.events)
        await ask(victim, f"Please {_marker(name)}", output_modalities=["text"])
        # Meanwhile another session is answered, however long the fault takes to end.
        answered = await _question(other, other_call, "How are you?")
        failed = await victim_call.wait_for("response.done", within=WITHIN_S, after=mark)
        again = await _question(victim, victim_call, "And now?")  # the session goes on
        await victim_call.close()
        await other_call.close()
    assert answered.response.status == "completed"
    assert failed.response.status == "failed"
    error = failed.response.status_details.error
    assert (error.type, error.code) == ("server_error", code)
    assert error.message and len(error.message) < 1000
    calls = [e for e in victim_call.events[mark:] if e.type == "response.function_call_arguments.done"]
    assert calls == []  # nothing of a failed answer's calls reaches the client
    assert [e.error.code for e in victim_call.of("error")] == []
    assert again.response.status == "completed"
    assert again.response.output[0].content[0].text == "Fine, thanks."


@pytest.mark.slow
async def test_a_call_id_with_control_characters_reaches_the_client_as_the_sessions_own(
    faulty_server: ServerThread, chat_server: ChatServer
) -> None:
    chat_server.faults["<id>"] = control_id
    async with sdk(faulty_server).realtime.connect(model="gpt-realtime") as connection:
        call = RealtimeCall(connection)
        await agent(connection, call)
        done = await _question(connection, call, "Weather? <id>")
        await call.close()
    assert done.response.status == "completed"
    [output] = done.response.output
    assert output.name == "get_weather" and re.fullmatch(r"call_[A-Za-z0-9]+", output.call_id)


@pytest.mark.slow
async def test_every_fault_in_a_row_leaves_both_sessions_answering(
    faulty_server: ServerThread, chat_server: ChatServer
) -> None:
    """Churn: one session meets every fault in turn, another is answered after each."""
    for name, (fault, _) in FAULTS.items():
        chat_server.faults[_marker(name)] = fault
    client = sdk(faulty_server)
    codes: list[str] = []
    async with (
        client.realtime.connect(model="gpt-realtime") as victim,
        client.realtime.connect(model="gpt-realtime") as other,
    ):
        victim_call, other_call = RealtimeCall(victim), RealtimeCall(other)
        await agent(victim, victim_call)
        await agent(other, other_call)
        for name in FAULTS:
            failed = await _question(victim, victim_call, f"Go {_marker(name)}")
            codes.append(failed.response.status_details.error.code)
            answered = await _question(other, other_call, "Still there?")
            assert answered.response.status == "completed"
        last = await _question(victim, victim_call, "And now?")
        await victim_call.close()
        await other_call.close()
    assert codes == [code for _, code in FAULTS.values()]
    assert last.response.status == "completed"
    closing = {"error", "session.closed"}
    assert [e.type for e in victim_call.events + other_call.events if e.type in closing] == []
