"""WebRTC calls in the fuzz and churn suites: random and oversized channel events, calls that come and go.

The codec fuzzer's families (``livegen.bench.fuzz_cases``, as ``test_fuzz_wire.py``
sends them on the WebSocket) go on one call's data channel, with events too
large for it to carry back; every reply must be a protocol-valid event, that
call must go on, and another call and a WebSocket session beside it must see
nothing of it. Then calls open and end every way a call ends, several at once,
and the server must free them all and go on serving. The server log must hold
no traceback and no error line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import websockets

from livegen.bench.fuzz_cases import voice_cases
from livegen.client.webrtc import Caller
from livegen.server.thread import ServerThread
from voice.scripted import registry

MANUAL = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}
NUM_CASES = 120
#: The largest message aiortc's caller sends (the server's max-message-size is 256 KiB).
MAX_SENT = 200_000


@pytest.fixture(autouse=True)
def captured_logs(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("livegen", "uvicorn", "uvicorn.error"):
        monkeypatch.setattr(logging.getLogger(name), "propagate", True)
    caplog.set_level(logging.INFO)


@pytest.fixture
def voice_server(start_server: Callable[..., ServerThread]) -> ServerThread:
    # A call lost without a goodbye parks its session for the grace period: a short one here.
    server = start_server(
        registry=registry(), voice_model="scripted-voice", world_model="none", resume_grace_s=1.0
    )
    server.wait_ready(timeout=30)
    return server


def assert_clean_log(caplog: pytest.LogCaptureFixture) -> None:
    records = [r for r in caplog.records if r.name.startswith(("livegen", "uvicorn"))]
    bad = [r for r in records if r.exc_info or r.levelno >= logging.ERROR or "Traceback" in r.getMessage()]
    assert bad == [], [r.getMessage() for r in bad][:5]


def check_event(event: Any) -> None:
    """A protocol-valid server event: an object with a string type; errors with OpenAI's body."""
    assert isinstance(event, dict) and isinstance(event.get("type"), str), event
    if event["type"] == "error":
        body = event["error"]
        assert all(isinstance(body.get(k), str) for k in ("type", "code", "message")), event


async def sentinel_round(caller: Caller, message: str | bytes, index: int) -> list[dict[str, Any]]:
    """Send one message and a sentinel on the channel; the replies up to the sentinel's error."""
    seen = len(caller.events)
    caller.channel.send(message)
    sentinel = f"sentinel_{index}"
    caller.send({"type": "conversation.item.retrieve", "item_id": "nope", "event_id": sentinel})
    await caller.wait_for(
        lambda e: e["type"] == "error" and e["error"].get("event_id") == sentinel, 30, sentinel
    )
    replies = caller.events[seen:]
    for event in replies:
        check_event(event)
    return [e for e in replies if not (e["type"] == "error" and e["error"].get("event_id") == sentinel)]


def oversized(index: int) -> list[str]:
    """Events whose answers are too large for the channel: a big item, a session.updated past it."""
    text = "z" * (MAX_SENT - 1000)
    item = {"id": f"item_big{index}", "type": "message", "role": "user"}
    item["content"] = [{"type": "input_text", "text": text}]  # type: ignore[assignment]
    tools = [{"type": "function", "name": "f", "description": text, "parameters": {"type": "object"}}]
    return [
        json.dumps({"type": "conversation.item.create", "item": item}),
        json.dumps({"type": "session.update", "session": {"type": "realtime", "instructions": text}}),
        json.dumps({"type": "session.update", "session": {"type": "realtime", "tools": tools}}),
    ]


async def test_random_and_oversized_channel_events_are_that_calls_errors_only(
    voice_server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random(30)
    fuzzed, bystander = Caller(voice_server.http_url, None), Caller(voice_server.http_url, None)
    try:
        await fuzzed.connect(session=MANUAL)
        await bystander.connect(session=MANUAL)
        async with websockets.connect(f"{voice_server.ws_url}/v1/realtime") as socket:
            assert json.loads(await socket.recv())["type"] == "session.created"
            num_errors = 0
            cases = [m for m in voice_cases(rng, NUM_CASES) if len(m) <= MAX_SENT] + oversized(0)
            for index, message in enumerate(cases):
                replies = await sentinel_round(fuzzed, message, index)
                num_errors += sum(r["type"] == "error" for r in replies)
                assert not [r for r in replies if r["type"] == "session.closed"], replies[:3]
            assert num_errors > len(cases) // 2  # most are refused, each with an error
            too_large = [e for e in fuzzed.events if e["type"] == "error"]
            assert any(e["error"]["code"] == "event_too_large" for e in too_large)
            # The fuzzed call goes on, and nothing reached the others.
            await sentinel_round(fuzzed, json.dumps({"type": "input_audio_buffer.clear"}), -1)
            await sentinel_round(bystander, json.dumps({"type": "input_audio_buffer.clear"}), -1)
            assert not [e for e in bystander.events if e["type"] == "error" and "sentinel" not in str(e)]
            await socket.send(json.dumps({"type": "input_audio_buffer.clear"}))
            assert (
                json.loads(await asyncio.wait_for(socket.recv(), 10))["type"] == "input_audio_buffer.cleared"
            )
    finally:
        await fuzzed.close()
        await bystander.close()
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{voice_server.http_url}/health")).status_code == 200
    assert_clean_log(caplog)


async def _one_call(server: ServerThread, index: int) -> None:
    """A call that ends one of the ways calls end: hangup, session.close, or a vanished peer."""
    caller = Caller(server.http_url, None)
    try:
        await caller.connect(session=MANUAL)
        await caller.event("session.updated")
        caller.send({"type": "response.create", "response": {"output_modalities": ["text"]}})
        await caller.event("response.done")
        way = index % 3
        if way == 0:
            assert (await caller.hangup()).status_code == 200
        elif way == 1:
            caller.send({"type": "session.close"})
        if way != 2:
            closed = await caller.event("session.closed", within=15)
            assert closed["type"] == "session.closed"
    finally:
        await caller.close()  # way 2: the peer vanishes without a word


async def test_calls_that_come_and_go_are_all_freed_and_the_server_goes_on(
    voice_server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    for round_start in range(0, 12, 3):
        await asyncio.gather(*(_one_call(voice_server, i) for i in range(round_start, round_start + 3)))
    voice = next(s for s in voice_server.app.state.livegen.services if s.name == "voice")
    deadline = time.monotonic() + 30
    while voice.calls.calls or voice.engine.runners or voice.calls.tasks:
        assert time.monotonic() < deadline, "calls were not freed"
        await asyncio.sleep(0.1)
    await _one_call(voice_server, 0)  # and the next call is served as the first was
    async with httpx.AsyncClient() as http:
        metrics = (await http.get(f"{voice_server.http_url}/metrics")).text
    assert "livegen_unsent_bytes 0.0" in metrics
    assert_clean_log(caplog)
