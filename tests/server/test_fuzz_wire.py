"""Fuzzing a real server over the wire: every reply protocol-valid, no traceback, others unharmed.

A bounded run of the codec fuzzer's families (``tests/protocol/test_wire_fuzz.py``)
against ``/v1/realtime`` and ``/v1/worlds`` of a real server with its real models:
deep nesting, a wrong type in every field, huge integers, binary messages, invalid
UTF-8. After each voice message a sentinel event (always answered with one error)
marks where that message's answers end. The server log is captured: it must hold
no traceback and no error line, whatever the client sent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import websockets
from websockets.frames import Frame, Opcode

from livegen.bench.fuzz_cases import voice_cases, world_cases
from livegen.server.thread import ServerThread

NUM_VOICE_CASES = 300
NUM_WORLD_CASES = 120


def check_event(event: Any) -> None:
    """A protocol-valid server event: an object with a string type; errors with OpenAI's body."""
    assert isinstance(event, dict) and isinstance(event.get("type"), str), event
    if event["type"] == "error":
        body = event["error"]
        assert {"type", "code", "message"} <= set(body) and all(
            isinstance(body[k], str) for k in ("type", "code", "message")
        ), event
        assert body["type"] == "invalid_request_error", event


@pytest.fixture(autouse=True)
def captured_logs(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every server log line reaches caplog, even after ``logs.configure()`` (the CLI's tests)
    stopped livegen's and uvicorn's loggers from propagating."""
    for name in ("livegen", "uvicorn", "uvicorn.error", "uvicorn.access"):
        monkeypatch.setattr(logging.getLogger(name), "propagate", True)
    caplog.set_level(logging.INFO)


@pytest.fixture
def fuzz_server(start_server: Callable[..., ServerThread]) -> ServerThread:
    server = start_server(world_model="procedural-world")
    server.wait_ready()
    return server


def assert_clean_log(caplog: pytest.LogCaptureFixture) -> None:
    tracebacks = [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert tracebacks == [] and errors == [], [r.getMessage() for r in tracebacks + errors][:5]


async def sentinel_round(ws: Any, message: str | bytes, index: int) -> list[dict[str, Any]]:
    """Send one fuzz message and a sentinel; the replies up to the sentinel's error."""
    await ws.send(message)
    sentinel = f"sentinel_{index}"
    await ws.send(json.dumps({"type": "conversation.item.retrieve", "item_id": "nope", "event_id": sentinel}))
    replies: list[dict[str, Any]] = []
    async with asyncio.timeout(30):
        while True:
            event = json.loads(await ws.recv())
            check_event(event)
            if event["type"] == "error" and event["error"].get("event_id") == sentinel:
                return replies
            replies.append(event)


async def test_voice_fuzz_over_the_wire(fuzz_server: ServerThread, caplog: pytest.LogCaptureFixture) -> None:
    url = f"{fuzz_server.ws_url}/v1/realtime"
    rng = random.Random(18)
    async with websockets.connect(url) as bystander, websockets.connect(url, max_size=None) as ws:
        assert json.loads(await bystander.recv())["type"] == "session.created"
        assert json.loads(await ws.recv())["type"] == "session.created"
        num_errors = 0
        for index, message in enumerate(voice_cases(rng, NUM_VOICE_CASES)):
            replies = await sentinel_round(ws, message, index)
            num_errors += sum(r["type"] == "error" for r in replies)
            assert not any(r["type"] == "session.closed" for r in replies), (message[:200], replies)
        assert num_errors > NUM_VOICE_CASES // 2  # most cases are refused, each with an error
        assert await sentinel_round(bystander, json.dumps({"type": "input_audio_buffer.clear"}), 0)
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{fuzz_server.http_url}/health")).status_code == 200
    assert_clean_log(caplog)


async def test_world_fuzz_over_the_wire(fuzz_server: ServerThread, caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(18)
    async with websockets.connect(f"{fuzz_server.ws_url}/v1/worlds") as ws:
        for message in world_cases(rng, NUM_WORLD_CASES):
            await ws.send(message)
            async with asyncio.timeout(30):
                event = json.loads(await ws.recv())
            check_event(event)
            assert event["type"] == "error", (message[:200], event)
    assert_clean_log(caplog)


async def test_invalid_utf8_closes_that_socket_only_with_1007_and_no_traceback(
    fuzz_server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"{fuzz_server.ws_url}/v1/realtime"
    async with websockets.connect(url) as bystander:
        await bystander.recv()
        for path in ("/v1/realtime", "/v1/worlds"):
            async with websockets.connect(f"{fuzz_server.ws_url}{path}") as ws:
                if path == "/v1/realtime":
                    await ws.recv()
                ws.protocol.send_frame(Frame(Opcode.TEXT, b'\xff\xfe{"type"'))
                ws.send_data()
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    async with asyncio.timeout(30):
                        while True:
                            await ws.recv()
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1007
        assert await sentinel_round(bystander, json.dumps({"type": "input_audio_buffer.clear"}), 0)
    assert_clean_log(caplog)
    assert any("Invalid UTF-8" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


async def test_a_13_mib_append_is_refused_by_the_rate_bound_and_the_session_goes_on(
    fuzz_server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    import base64

    url = f"{fuzz_server.ws_url}/v1/realtime"
    async with websockets.connect(url, max_size=None) as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"
        # A 13 MiB message (under the 16 MiB frame limit): about 200 s of 24 kHz audio at once.
        flood = base64.b64encode(bytes(int(9.75 * 1024 * 1024))).decode()
        await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": flood, "event_id": "big"}))
        async with asyncio.timeout(60):
            error = json.loads(await ws.recv())
        check_event(error)
        assert (error["error"]["code"], error["error"]["event_id"]) == ("rate_limit_exceeded", "big")
        small = base64.b64encode(bytes(24_000 * 2)).decode()  # one second: taken
        await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": small}))
        assert await sentinel_round(ws, json.dumps({"type": "input_audio_buffer.commit"}), 0)
    assert_clean_log(caplog)


async def test_deep_nesting_as_the_first_event_of_a_resume_is_refused_with_a_close_frame(
    fuzz_server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    async with websockets.connect(f"{fuzz_server.ws_url}/v1/realtime?session_id=sess_x") as ws:
        await ws.send("[" * 5_000 + "]" * 5_000)
        async with asyncio.timeout(30):
            error = json.loads(await ws.recv())
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await ws.recv()
    assert error["error"]["code"] == "invalid_json"
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    assert_clean_log(caplog)


async def test_a_bug_in_one_session_ends_it_with_error_terminal_and_1011_and_no_other(
    fuzz_server: ServerThread, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from livegen.voice.session import Session

    original = Session.receive

    def receive(self: Session, event: Any, now: float) -> Any:
        if getattr(event, "item_id", None) == "boom":  # fault injection: a bug of ours
            raise KeyError("boom")
        return original(self, event, now)

    monkeypatch.setattr(Session, "receive", receive)
    url = f"{fuzz_server.ws_url}/v1/realtime"
    async with websockets.connect(url) as bystander, websockets.connect(url) as ws:
        await bystander.recv()
        await ws.recv()
        await ws.send(json.dumps({"type": "conversation.item.retrieve", "item_id": "boom"}))
        events = []
        with pytest.raises(websockets.ConnectionClosed) as closed:
            async with asyncio.timeout(30):
                while True:
                    events.append(json.loads(await ws.recv()))
        assert [e["type"] for e in events] == ["error", "session.closed"]
        assert events[0]["error"]["type"] == "server_error" and events[1]["reason"] == "server_error"
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
        assert await sentinel_round(bystander, json.dumps({"type": "input_audio_buffer.clear"}), 0)
    failures = [r for r in caplog.records if r.getMessage() == "voice.runner_failed"]
    assert len(failures) == 1 and failures[0].exc_info
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == failures


async def test_a_refused_websocket_is_one_info_line(
    start_server: Callable[..., ServerThread], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    server = start_server(api_key="right", world_model="procedural-world")
    for _ in range(3):
        with pytest.raises(websockets.InvalidStatus) as refused:
            async with websockets.connect(f"{server.ws_url}/v1/realtime"):
                pass
        assert refused.value.response.status_code == 401

    def handshake_lines() -> list[logging.LogRecord]:
        # uvicorn < 0.55 logs "returned without completing handshake" at ERROR (logs.py makes it INFO);
        # later ones log nothing of their own for an HTTP answer to a WebSocket, or its access line.
        marks = ("without completing handshake", '"WebSocket /v1/realtime" 401')
        return [r for r in caplog.records if any(m in r.getMessage() for m in marks)]

    for _ in range(100):  # uvicorn logs the refusal on its thread after the client has its 401
        if len(handshake_lines()) >= 3:
            break
        await asyncio.sleep(0.02)
    assert_clean_log(caplog)
    lines = handshake_lines()
    assert len(lines) <= 3 and all(r.levelno == logging.INFO for r in lines)
