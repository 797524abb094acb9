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
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
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
    service.engine.models["scripted-voice"].script.reply_ms = 1500
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
        if (
            not service.engine.runners
            and "aclose" in service.engine.models["scripted-voice"].streams[-1].calls
        ):
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
    assert (
        "aclose" in service.engine.models["scripted-voice"].streams[-1].calls and not service.engine.runners
    )
    late = await resume(server, session_id, token, last_seq=len(before))
    assert (await recv(late))["error"]["code"] == "session_not_found"


async def test_a_clean_close_ends_the_session_at_once(start_server: Callable[..., ServerThread]) -> None:
    server = serve(start_server)
    ws, before = await start_answer(server)
    await ws.close()  # code 1000: the client meant to leave
    service = await session_ended(server)
    assert (
        not service.engine.runners and "aclose" in service.engine.models["scripted-voice"].streams[-1].calls
    )
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


async def test_a_token_resumes_once_even_when_two_resumes_race(
    start_server: Callable[..., ServerThread],
) -> None:
    server = serve(start_server)
    ws, before = await start_answer(server)
    session_id, token = before[0]["session"]["id"], before[0]["resume_token"]
    await drop(ws)
    racers = await asyncio.gather(*(resume(server, session_id, token, len(before)) for _ in range(2)))
    firsts = sorted([(await recv(racer))["type"] for racer in racers])
    assert firsts == ["error", "session.resumed"]  # single use: the loser is refused


async def test_a_binary_first_frame_on_the_resume_path_is_an_error_and_a_close(
    start_server: Callable[..., ServerThread],
) -> None:
    server = serve(start_server)
    async with websockets.connect(f"{server.ws_url}/v1/realtime?session_id=sess_x") as ws:
        await ws.send(b"\x00\x01binary")
        assert (await recv(ws))["error"]["code"] == "invalid_resume"
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


class DeafClient:
    """A raw WebSocket client that stops reading after the greeting, so the server's writes to it
    block once the kernel's buffers are full (websockets' clients keep reading into memory)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        key = base64.b64encode(b"0123456789abcdef").decode()
        request = (
            "GET /v1/realtime?model=scripted-voice HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        self.buffer = b""
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self.sock.recv(4096)
        self.buffer = self.buffer.split(b"\r\n\r\n", 1)[1]

    def first_event(self) -> dict[str, Any]:
        while len(self.buffer) < 4 or len(self.buffer) < 4 + int.from_bytes(self.buffer[2:4], "big"):
            self.buffer += self.sock.recv(4096)
        assert self.buffer[1] == 126  # session.created: 126..65535 bytes
        return dict(json.loads(self.buffer[4 : 4 + int.from_bytes(self.buffer[2:4], "big")]))

    def send(self, event: dict[str, Any]) -> None:
        payload = json.dumps(event).encode()
        size = len(payload)
        header = (
            bytes([0x81, 0x80 | 127]) + size.to_bytes(8, "big") if size > 125 else bytes([0x81, 0x80 | size])
        )
        self.sock.sendall(header + b"\0\0\0\0" + payload)  # a zero mask leaves the payload as it is


async def test_a_resume_takes_over_promptly_from_a_socket_whose_peer_stopped_reading(
    start_server: Callable[..., ServerThread],
) -> None:
    server = serve(start_server)
    deaf = DeafClient(server.port)
    created = deaf.first_event()
    session_id, token = created["session"]["id"], created["resume_token"]
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x" * 300_000}]}
    deaf.send({"type": "conversation.item.create", "item": {"id": "big", **item}})
    # 12 MB of answers that this client never reads: the server's write blocks, while the unsent
    # bytes stay under --max-unsent-bytes (16 MiB), past which the session would end instead.
    for _ in range(40):
        deaf.send({"type": "conversation.item.retrieve", "item_id": "big"})
    live = next(s for s in server.app.state.livegen.services if s.name == "voice").engine.live[session_id]
    seq = -1
    while seq != live.attachment.seq:  # until the session's sender is stuck in a write
        seq = live.attachment.seq
        await asyncio.sleep(0.5)
    assert seq < 40
    ws2 = await resume(server, session_id, token, last_seq=seq)
    greeting = await asyncio.wait_for(recv(ws2), 10)  # not the tens of seconds until TCP gives up
    assert greeting["type"] == "session.resumed"
    await ws2.send(json.dumps({"type": "response.cancel"}))
    assert (await until(ws2, "error", []))["error"]["code"] == "response_cancel_not_active"
    deaf.sock.close()


async def test_dropped_sessions_park_apart_from_live_ones_within_their_own_budget(
    start_server: Callable[..., ServerThread],
) -> None:
    server = start_server(
        registry=registry(),
        voice_model="scripted-voice",
        world_model="none",
        max_sessions=2,
        max_parked_sessions=2,
    )
    server.wait_ready(timeout=30)
    url = f"{server.ws_url}/v1/realtime?model=scripted-voice"
    sessions = []
    for _ in range(2):
        ws = await websockets.connect(url)
        OPENED.append(ws)
        sessions.append((await until(ws, "session.created", []), ws))
    refused = await websockets.connect(url)
    OPENED.append(refused)
    assert (await recv(refused))["error"]["code"] == "too_many_sessions"  # 2 live at most
    for _, ws in sessions[:2]:
        await drop(ws)
    await asyncio.sleep(0.3)
    async with httpx.AsyncClient() as http:
        voice = (await http.get(f"{server.http_url}/health")).json()["services"]["voice"]
        assert (voice["live_sessions"], voice["parked_sessions"]) == (0, 2) and voice["parked_bytes"] > 0
        metrics = (await http.get(f"{server.http_url}/metrics")).text
        assert 'livegen_sessions_parked{kind="voice"} 2.0' in metrics
    fresh = await websockets.connect(url)  # parked sessions lock nobody out
    OPENED.append(fresh)
    assert (await until(fresh, "session.created", []))["type"] == "session.created"
    await drop(fresh)  # a third parked session: the oldest parked one makes room
    await asyncio.sleep(0.3)
    oldest = sessions[0][0]
    late = await resume(server, oldest["session"]["id"], oldest["resume_token"], last_seq=1)
    assert (await recv(late))["error"]["code"] == "session_not_found"
    second = sessions[1][0]
    back = await resume(server, second["session"]["id"], second["resume_token"], last_seq=1)
    assert (await recv(back))["type"] == "session.resumed"


async def duplex_open(server: ServerThread) -> tuple[Any, dict[str, Any]]:
    ws = await websockets.connect(f"{server.ws_url}/v1/realtime?duplex=1&model=scripted-voice&autostart=0")
    OPENED.append(ws)
    await ws.send(json.dumps({"type": "session.update", "session": {"sample_rate_hz": 16_000}}))
    created = await recv(ws)
    assert created["type"] == "session.created" and created["server_event_seq"] == 1
    return ws, created


async def duplex_resume(server: ServerThread, first: str | bytes) -> Any:
    ws = await websockets.connect(f"{server.ws_url}/v1/realtime?duplex=1&model=scripted-voice&autostart=0")
    OPENED.append(ws)
    await ws.send(first)
    return ws


async def test_duplex_resumes_are_refused_with_vllm_omnis_codes_and_acks_trim_the_journal(
    start_server: Callable[..., ServerThread],
) -> None:
    server = serve(start_server)
    ws, created = await duplex_open(server)
    session_id, token = created["session"]["id"], created["resume_token"]
    await ws.send(json.dumps({"type": "response.create"}))
    seen = await until(ws, "response.done", [])
    await ws.send(json.dumps({"type": "session.event_ack", "server_event_seq": seen["server_event_seq"]}))
    await ws.send(json.dumps({"type": "session.event_ack", "server_event_seq": 10_000, "event_id": "a1"}))
    error = await until(ws, "error", [])
    assert (error["error"]["code"], error["error"]["event_id"]) == ("invalid_event_ack", "a1")
    await drop(ws)

    def resume_text(**fields: Any) -> str:
        base = {"type": "session.resume", "session_id": session_id, "resume_token": token}
        return json.dumps({**base, "last_received_server_event_seq": 0, **fields})

    refusals = {
        "session_resume_expired": resume_text(session_id="sess_nobody"),
        "invalid_resume_token": resume_text(resume_token="wrong"),
        "invalid_session_resume": resume_text(last_received_server_event_seq=-1),
        "session_resume_conflict": resume_text(last_received_server_event_seq=10_000),
    }
    for code, text in refusals.items():
        assert (await recv(await duplex_resume(server, text)))["error"]["code"] == code
    binary = await duplex_resume(server, b"\x00")
    assert (await recv(binary))["error"]["code"] == "invalid_event"
    gap = await duplex_resume(server, resume_text())  # acked events are gone: start over
    assert (await recv(gap))["type"] == "session.resync_required"
    back = await duplex_resume(server, resume_text(last_received_server_event_seq=seen["server_event_seq"]))
    resumed = await recv(back)
    assert resumed["type"] == "session.resumed" and resumed["session"]["id"] == session_id
    assert resumed["resume_token"] != token
