"""session.resume: a voice session outlives a lost socket and continues, gapless, on a new one.

Real server, real WebSocket clients (``websockets``; the OpenAI SDK has no
resume). The scripted model streams a long answer; the client drops its socket
mid-answer, reconnects with ``?session_id=`` and names the last event it got.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import websockets

from livegen.server.thread import ServerThread
from voice.scripted import registry

#: Every client connection a test opens; all are closed after it (a refused one too).
OPENED: list[Any] = []


@pytest.fixture(autouse=True)
async def close_clients() -> AsyncIterator[None]:
    yield
    while OPENED:
        with contextlib.suppress(Exception):
            await OPENED.pop().close()


def serve(start_server: Callable[..., ServerThread], grace_s: float = 30.0) -> ServerThread:
    server = start_server(
        registry=registry(), voice_model="scripted-voice", world_model="none", resume_grace_s=grace_s
    )
    server.wait_ready(timeout=30)
    service = next(s for s in server.app.state.livegen.services if s.name == "voice")
    service.models["scripted-voice"].script.reply_ms = 1500
    return server


async def recv(ws: Any) -> dict[str, Any]:
    return dict(json.loads(await asyncio.wait_for(ws.recv(), 20)))


async def until(ws: Any, kind: str, into: list[dict[str, Any]]) -> dict[str, Any]:
    while True:
        event = await recv(ws)
        into.append(event)
        if event["type"] == kind:
            return event


async def start_answer(server: ServerThread) -> tuple[Any, list[dict[str, Any]]]:
    ws = await websockets.connect(f"{server.ws_url}/v1/realtime?model=scripted-voice")
    OPENED.append(ws)
    seen: list[dict[str, Any]] = []
    await until(ws, "session.created", seen)
    await ws.send(json.dumps({"type": "response.create"}))
    for _ in range(3):
        await until(ws, "response.output_audio.delta", seen)
    return ws, seen


async def resume(server: ServerThread, session_id: str, token: str, last_seq: int) -> Any:
    ws = await websockets.connect(f"{server.ws_url}/v1/realtime?session_id={session_id}")
    OPENED.append(ws)
    message = {
        "type": "session.resume",
        "session_id": session_id,
        "resume_token": token,
        "last_event_seq": last_seq,
    }
    await ws.send(json.dumps(message))
    return ws


async def session_ended(server: ServerThread) -> Any:
    """The voice service, once its last session has ended and released its model stream (or 5 s)."""
    service = next(s for s in server.app.state.livegen.services if s.name == "voice")
    for _ in range(100):
        if not service.runners and "aclose" in service.models["scripted-voice"].streams[-1].calls:
            break
        await asyncio.sleep(0.05)
    return service


async def drop(ws: Any) -> None:
    """Lose the connection without a close frame, as a network drop does (a clean close means
    the client left, and ends the session)."""
    ws.transport.abort()
    with contextlib.suppress(Exception):
        await ws.wait_closed()


def audio_bytes(events: list[dict[str, Any]]) -> int:
    return sum(
        len(base64.b64decode(e["delta"])) for e in events if e["type"] == "response.output_audio.delta"
    )


async def test_a_dropped_socket_resumes_with_nothing_lost_or_repeated(
    start_server: Callable[..., ServerThread],
) -> None:
    server = serve(start_server)
    ws, before = await start_answer(server)
    session_id, token = before[0]["session"]["id"], before[0]["resume_token"]
    await drop(ws)
    await asyncio.sleep(0.3)  # the answer goes on while nobody listens
    ws2 = await resume(server, session_id, token, last_seq=len(before))
    after: list[dict[str, Any]] = []
    greeting = await recv(ws2)
    assert greeting["type"] == "session.resumed" and greeting["last_event_seq"] == len(before)
    assert greeting["resume_token"] != token  # rotated
    await until(ws2, "response.done", after)
    stream = before + after
    assert [e["type"] for e in stream].count("response.done") == 1
    assert len({e["event_id"] for e in stream}) == len(stream)  # nothing twice
    assert audio_bytes(stream) == 2 * 24 * 1500  # the whole answer, nothing missing
    # the session goes on over the new socket, and the old token no longer opens it
    await ws2.send(json.dumps({"type": "response.cancel", "event_id": "c1"}))
    error = await until(ws2, "error", [])
    assert error["error"]["code"] == "response_cancel_not_active"
    stale = await resume(server, session_id, token, last_seq=0)
    assert (await recv(stale))["error"]["code"] == "invalid_resume_token"
    await ws2.close()


async def test_a_wrong_token_or_seq_is_refused_and_the_session_stays_resumable(
    start_server: Callable[..., ServerThread],
) -> None:
    server = serve(start_server)
    ws, before = await start_answer(server)
    session_id, token = before[0]["session"]["id"], before[0]["resume_token"]
    await drop(ws)
    wrong = await resume(server, session_id, "not-the-token", last_seq=1)
    assert (await recv(wrong))["error"]["code"] == "invalid_resume_token"
    unknown = await resume(server, "sess_nobody", token, last_seq=1)
    assert (await recv(unknown))["error"]["code"] == "session_not_found"
    future = await resume(server, session_id, token, last_seq=10_000)
    assert (await recv(future))["error"]["code"] == "invalid_value"
    ws2 = await resume(server, session_id, token, last_seq=0)  # from the start: the whole stream again
    assert (await recv(ws2))["type"] == "session.resumed"
    replayed: list[dict[str, Any]] = []
    await until(ws2, "response.done", replayed)
    assert replayed[0]["type"] == "session.created" and audio_bytes(replayed) == 2 * 24 * 1500
    await ws2.close()


async def test_a_resume_takes_over_a_socket_that_still_looks_open(
    start_server: Callable[..., ServerThread],
) -> None:
    server = serve(start_server)
    ws, before = await start_answer(server)
    session_id, token = before[0]["session"]["id"], before[0]["resume_token"]
    ws2 = await resume(server, session_id, token, last_seq=len(before))
    assert (await recv(ws2))["type"] == "session.resumed"
    with pytest.raises(websockets.ConnectionClosed) as closed:
        while True:
            await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4001
    await until(ws2, "response.done", [])
    await ws2.close()


async def test_after_the_grace_period_the_session_is_gone_and_released(
    start_server: Callable[..., ServerThread],
) -> None:
    server = serve(start_server, grace_s=0.2)
    ws, before = await start_answer(server)
    session_id, token = before[0]["session"]["id"], before[0]["resume_token"]
    await drop(ws)
    service = await session_ended(server)
    assert "aclose" in service.models["scripted-voice"].streams[-1].calls and not service.runners
    late = await resume(server, session_id, token, last_seq=len(before))
    assert (await recv(late))["error"]["code"] == "session_not_found"


async def test_a_clean_close_ends_the_session_at_once(start_server: Callable[..., ServerThread]) -> None:
    server = serve(start_server)
    ws, before = await start_answer(server)
    await ws.close()  # code 1000: the client meant to leave
    service = await session_ended(server)
    assert not service.runners and "aclose" in service.models["scripted-voice"].streams[-1].calls
    late = await resume(server, before[0]["session"]["id"], before[0]["resume_token"], last_seq=1)
    assert (await recv(late))["error"]["code"] == "session_not_found"


async def test_resume_inside_a_session_or_a_bad_first_event_is_a_clear_error(
    start_server: Callable[..., ServerThread],
) -> None:
    server = serve(start_server)
    async with websockets.connect(f"{server.ws_url}/v1/realtime?model=scripted-voice") as ws:
        created = await until(ws, "session.created", [])
        message = {
            "type": "session.resume",
            "session_id": created["session"]["id"],
            "resume_token": "x",
            "event_id": "r1",
        }
        await ws.send(json.dumps(message))
        error = await until(ws, "error", [])
        assert (error["error"]["code"], error["error"]["event_id"]) == ("invalid_resume", "r1")
        async with websockets.connect(
            f"{server.ws_url}/v1/realtime?session_id={created['session']['id']}"
        ) as bad:
            await bad.send(json.dumps({"type": "response.create"}))
            assert (await recv(bad))["error"]["code"] == "invalid_resume"
