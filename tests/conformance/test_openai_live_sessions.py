"""GPT-Live's session routes through the official ``openai`` SDK (``client.live.sessions``), unchanged.

Against ``livegen serve`` (the embedded cascade), with only the SDK's base URL
pointed at it: ``hangup`` ends a live session, a WebSocket's or a WebRTC
call's, with one ``session.closed`` (``close_requested``) even when the client
closes at the same moment, and an unknown id (or one opened with another
ephemeral key) is a 404 in OpenAI's error shape. The routes livegen does not
serve (``accept``, ``reject``, ``refer``: SIP calls; ``fork``, its socket too;
``download_recording``) answer ``unsupported_operation``, a 400 in that shape,
never a bare 404 nor a 500.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import openai
import pytest
import websockets
from openai import AsyncOpenAI

from conformance.conftest import API_KEY
from conformance.support import until
from conformance.test_openai_live import EVENTS, Live, conformance, connect, started
from conformance.test_openai_live_webrtc import webrtc_session
from livegen.server.thread import ServerThread

UNKNOWN = "sess_0000000000000000"


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
            hung_up = await asyncio.gather(client.live.sessions.hangup(session_id), close)
            assert hung_up == [None, None]
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
