"""GPT-Live's session routes and usage through the official ``openai`` SDK, unchanged.

Against ``livegen serve`` (the embedded cascade), with only the SDK's base URL
pointed at it: ``hangup`` ends a live session, a WebSocket's or a WebRTC
call's, with one ``session.closed`` (``close_requested``) even when the client
closes at the same moment, and an unknown id (or one opened with another
ephemeral key) is a 404 in OpenAI's error shape. The routes livegen does not
serve (``accept``, ``reject``, ``refer``: SIP calls; ``fork``, its socket too;
``download_recording``) answer ``unsupported_operation``, a 400 in that shape,
never a bare 404 nor a 500. The usage a session reports is what it used:
whole seconds, cumulative, and the context its language model counted over
that model's window (omitted where the window is unknown).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
import websockets
from openai import AsyncOpenAI

from conformance.conftest import API_KEY, _serve
from conformance.support import until
from conformance.test_openai_live import EVENTS, Live, conformance, connect, started
from conformance.test_openai_live_webrtc import webrtc_session
from livegen.models import Registry
from livegen.server.thread import ServerThread
from models.cascade.support import ChatServer, Reply

UNKNOWN = "sess_0000000000000000"
#: The language model's window on the metered server, and what each of its answers reports.
CONTEXT_TOKENS = 1000
PROMPT, COMPLETION = 170, 30


@pytest.fixture
def metered_server(voice_registry: Registry, chat: ChatServer) -> Iterator[ServerThread]:
    """``livegen serve --llm-base-url`` at ``chat``, with ``--llm-context-tokens``."""
    server = _serve(
        voice_registry, llm_base_url=chat.url, llm_model="tiny", llm_context_tokens=CONTEXT_TOKENS
    )
    try:
        server.wait_ready(timeout=300)
        yield server
    finally:
        server.stop()
        voice_registry.load("cascade").use_llm(None, None)  # the cascade is shared by the run's servers


def sdk(server: ServerThread, key: str = API_KEY) -> AsyncOpenAI:
    return AsyncOpenAI(api_key=key, base_url=f"{server.http_url}/v1", max_retries=0)


async def rest_of(live: Live) -> list[dict[str, Any]]:
    """What the session sends after its first ``session.closed``, until the socket closes."""
    await until(lambda: live._reader.done(), 30, "session.closed")
    after: list[dict[str, Any]] = []
    with pytest.raises(websockets.exceptions.ConnectionClosed):
        while True:
            after.append(json.loads(await asyncio.wait_for(live.connection.recv_bytes(), 30)))
    return after


async def forgotten(client: AsyncOpenAI, session_id: str) -> openai.NotFoundError:
    """The 404 a hangup gets once the session has ended and gone (it may still be letting go)."""
    while True:
        try:
            await client.live.sessions.hangup(session_id)
        except openai.NotFoundError as gone:
            return gone
        await asyncio.sleep(0.05)


def assert_not_found(error: openai.NotFoundError, session_id: str) -> None:
    assert error.body == {
        "type": "invalid_request_error",
        "code": "session_not_found",
        "message": f"no live session with id {session_id!r}",
        "param": "session_id",
    }


@conformance("live-close")
async def test_a_hangup_ends_a_websocket_session_with_one_session_closed(plain_server: ServerThread) -> None:
    client = sdk(plain_server)
    try:
        async with connect(plain_server) as live:
            session_id = (await started(live))["session"]["id"]
            live.listen()  # the microphone streams: the hangup cuts a read under way short
            await asyncio.sleep(0.5)
            assert await client.live.sessions.hangup(session_id) is None
            after = await rest_of(live)
            (closed,) = live.of("session.closed")
            assert closed["reason"] == "close_requested" and closed["session"]["id"] == session_id
            assert closed["usage"]["seconds"] > 0
            assert not live.of("error") and not [e for e in after if e["type"] == "session.closed"]
        assert_not_found(await forgotten(client, session_id), session_id)
    finally:
        await client.close()


@conformance("live-close")
async def test_a_hangup_and_the_clients_own_close_at_once_end_the_session_once(
    plain_server: ServerThread,
) -> None:
    client = sdk(plain_server)
    try:
        async with connect(plain_server) as live:
            session_id = (await started(live))["session"]["id"]
            close = live.connection.send({"type": "session.close", "event_id": "close_1"})
            hangup = client.live.sessions.hangup(session_id)
            hung_up, sent = await asyncio.gather(hangup, close, return_exceptions=True)
            # The hangup may have ended the session, and closed its socket, before the send.
            assert sent is None or isinstance(sent, websockets.exceptions.ConnectionClosedOK), sent
            if hung_up is not None:  # the client's close ended the session, and it was gone, first
                assert isinstance(hung_up, openai.NotFoundError), hung_up
                assert_not_found(hung_up, session_id)
            after = await rest_of(live)
            assert len(live.of("session.closed")) == 1 and live.of("session.closed")[0]["reason"] == (
                "close_requested"
            )
            assert not live.of("error") and not after
    finally:
        await client.close()


@conformance("live-close")
async def test_a_hangup_ends_a_webrtc_session_with_session_closed_on_the_channel(
    plain_server: ServerThread,
) -> None:
    client = sdk(plain_server)
    try:
        async with webrtc_session(plain_server) as (caller, session_id):
            await client.live.sessions.hangup(session_id)
            closed = await caller.event("session.closed", within=30)
            assert closed["reason"] == "close_requested"
            usage = closed["usage"]  # WebRTC's breakdown: inference never pauses here
            assert usage["active_seconds"] == usage["seconds"] >= 1 and usage["paused_seconds"] == 0
            EVENTS.validate_python(closed)
            assert_not_found(await forgotten(client, session_id), session_id)
            assert [e["type"] for e in caller.events].count("session.closed") == 1
    finally:
        await client.close()


@conformance("live-keys")
async def test_an_ephemeral_key_hangs_up_only_its_own_session(plain_server: ServerThread) -> None:
    server_side = sdk(plain_server)
    own, other = [(await server_side.realtime.client_secrets.create()).value for _ in range(2)]
    browser, stranger = sdk(plain_server, own), sdk(plain_server, other)
    try:
        async with connect(plain_server, key=own) as live:
            session_id = (await started(live))["session"]["id"]
            with pytest.raises(openai.NotFoundError) as refused:  # another key's session is none of its
                await stranger.live.sessions.hangup(session_id)
            assert_not_found(refused.value, session_id)
            await browser.live.sessions.hangup(session_id)
            await rest_of(live)
            assert [e["reason"] for e in live.of("session.closed")] == ["close_requested"]
    finally:
        for client in (server_side, browser, stranger):
            await client.close()


@conformance("live-errors")
async def test_hanging_up_an_unknown_session_is_openais_404(plain_server: ServerThread) -> None:
    async with httpx.AsyncClient(base_url=plain_server.http_url) as http:
        answer = await http.post(
            f"/v1/live/sessions/{UNKNOWN}/hangup", headers={"Authorization": f"Bearer {API_KEY}"}
        )
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "session_not_found"
    assert set(answer.json()["error"]) == {"type", "code", "message", "param"}


@conformance("live-errors")
async def test_the_session_routes_livegen_does_not_serve_are_refused_by_name(
    plain_server: ServerThread,
) -> None:
    client = sdk(plain_server)
    sessions = client.live.sessions
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "accept": lambda: sessions.accept(UNKNOWN, session={"model": "gpt-live-1"}),
        "reject": lambda: sessions.reject(UNKNOWN, status_code=486),
        "refer": lambda: sessions.refer(UNKNOWN, target_uri="tel:+14155550123"),
        "fork": lambda: sessions.fork(UNKNOWN, transport={"type": "webrtc", "sdp": "v=0\r\n"}),
        "content": lambda: sessions.download_recording(UNKNOWN),
    }
    try:
        for operation, call in calls.items():
            with pytest.raises(openai.BadRequestError) as refused:
                await call()
            error = refused.value.body
            assert isinstance(error, dict) and error["type"] == "invalid_request_error", error
            assert error["code"] == "unsupported_operation" and f"/{operation} " in error["message"], error
        # The fork socket (``client.live.forks.connect``): the same refusal as an error event, then a close.
        async with client.live.forks.connect(session_id=UNKNOWN, max_retries=0) as fork:
            refusal = json.loads(await fork.recv_bytes())
        EVENTS.validate_python(refusal)
        assert refusal["error"]["code"] == "unsupported_operation"
    finally:
        await client.close()


async def commentary_said(live: Live, n: int) -> dict[str, Any]:
    """Ask the model to speak; the ``session.usage.updated`` after what it said."""
    say = {"type": "session.commentary.append", "content": "Greet the user.", "delegation_id": None}
    await live.connection.send({**say, "event_id": f"greet_{n}"})
    return (await until(lambda: live.of("session.usage.updated")[n - 1 :], 90, "the greeting said"))[0]


@conformance("live-usage")
async def test_usage_is_whole_seconds_and_the_context_the_language_model_counted(
    metered_server: ServerThread, chat: ChatServer
) -> None:
    chat.replies = [Reply(("Hello there.",), usage=(PROMPT, COMPLETION, 0)), Reply(("Hi again.",))]
    async with connect(metered_server) as live:
        await started(live)
        first = await commentary_said(live, 1)
        assert first["context_window"] == {"usage_ratio": (PROMPT + COMPLETION) / CONTEXT_TOKENS}
        second = await commentary_said(live, 2)  # the double's default answer reports 17 + 5
        assert second["context_window"] == {"usage_ratio": (17 + 5) / CONTEXT_TOKENS}
        await live.connection.send({"type": "session.close"})
        await rest_of(live)
    (closed,) = live.of("session.closed")
    seconds = [first["usage"]["seconds"], second["usage"]["seconds"], closed["usage"]["seconds"]]
    assert all(s == int(s) for s in seconds) and 1 <= seconds[0] <= seconds[1] <= seconds[2], seconds
    assert "active_seconds" not in closed["usage"]  # the breakdown is WebRTC's


@conformance("live-usage")
async def test_usage_omits_the_context_window_when_the_model_has_none(plain_server: ServerThread) -> None:
    async with connect(plain_server) as live:
        await started(live)
        usage = await commentary_said(live, 1)
        assert usage["context_window"] is None and usage["usage"]["seconds"] >= 1
