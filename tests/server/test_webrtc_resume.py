"""A call whose connection is lost parks its session as a socket's; a new call or a socket takes it back.

The server runs the scripted test model; callers are aiortc (``livegen.client.webrtc``), sockets
plain WebSockets. A resuming call (a page that reloaded) posts its offer to
``/v1/realtime/calls?session_id=`` with the ``session.resume`` a socket would send first
(docs/voice-protocol.md, Calls); a page may also resume over a WebSocket.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import websockets

from livegen.client.webrtc import Caller, loudness, mint
from livegen.server.thread import ServerThread
from voice.scripted import registry

MANUAL = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}
KEPT = {
    "type": "message",
    "id": "item_kept",
    "role": "user",
    "content": [{"type": "input_text", "text": "remember me"}],
}
PCMU = {"type": "realtime", "audio": {"output": {"format": {"type": "audio/pcmu"}}}}
#: Every caller and socket a test opens with ``caller_of``/``open_socket``; all closed after it.
OPENED: list[Any] = []


@pytest.fixture(autouse=True)
async def close_clients(start_server: Callable[..., ServerThread]) -> AsyncIterator[None]:
    yield  # before the servers stop (set up after start_server, so torn down before it)
    while OPENED:
        with contextlib.suppress(Exception):
            await OPENED.pop().close()


@pytest.fixture
def server(start_server: Callable[..., ServerThread]) -> ServerThread:
    running = start_server(registry=registry(), voice_model="scripted-voice", world_model="none")
    running.wait_ready(timeout=30)
    return running


def voice_service(server: ServerThread) -> Any:
    return next(s for s in server.app.state.livegen.services if s.name == "voice")


async def recv_until(ws: Any, kind: str, into: list[dict[str, Any]]) -> dict[str, Any]:
    while True:
        event = dict(json.loads(await asyncio.wait_for(ws.recv(), 20)))
        into.append(event)
        if event["type"] in (kind, "error"):
            return event


async def until_parked(server: ServerThread, session_id: str, within: float = 30.0) -> None:
    service = voice_service(server)
    deadline = time.monotonic() + within
    while service.calls.calls or session_id not in service.engine.parked:
        assert time.monotonic() < deadline, "the lost call's session did not park"
        await asyncio.sleep(0.1)


async def test_a_lost_call_parks_and_resumes_on_a_websocket(
    start_server: Callable[..., ServerThread],
) -> None:
    server = start_server(registry=registry(), voice_model="scripted-voice", world_model="none")
    server.wait_ready(timeout=30)
    caller = Caller(server.http_url, None)
    try:
        await caller.connect(session=MANUAL)
        created = await caller.event("session.created")
        session_id, token = created["session"]["id"], created["resume_token"]
        caller.send({"type": "conversation.item.create", "item": KEPT})
        await caller.wait_for(lambda e: e["type"] == "conversation.item.done", 15, "the item")
        seen = len(caller.events)  # every event so far is the session's (no answer has played)
    finally:
        await caller.close()  # the connection is lost: no hangup, no session.close
    await until_parked(server, session_id)
    url = f"{server.ws_url}/v1/realtime?session_id={session_id}"
    async with websockets.connect(url) as ws:
        resume = {"session_id": session_id, "resume_token": token, "last_event_seq": seen}
        await ws.send(json.dumps({"type": "session.resume", **resume}))
        events: list[dict[str, Any]] = []
        greeting = await recv_until(ws, "session.resumed", events)
        assert greeting["type"] == "session.resumed", greeting
        assert greeting["last_event_seq"] == greeting["latest_seq"] == seen  # nothing lost, nothing twice
        # The session is the call's (its conversation and manual turns), now on the socket...
        await ws.send(json.dumps({"type": "conversation.item.retrieve", "item_id": "item_kept"}))
        retrieved = await recv_until(ws, "conversation.item.retrieved", events)
        assert retrieved["item"]["content"][0]["text"] == "remember me", retrieved
        # ...whose answers' audio comes as events again, not on the call's (gone) track.
        await ws.send(json.dumps({"type": "response.create"}))
        await recv_until(ws, "response.done", events)
        assert any(e["type"] == "response.output_audio.delta" for e in events)
        assert session_id not in voice_service(server).engine.parked


async def test_a_hung_up_call_does_not_park(start_server: Callable[..., ServerThread]) -> None:
    server = start_server(registry=registry(), voice_model="scripted-voice", world_model="none")
    server.wait_ready(timeout=30)
    caller = Caller(server.http_url, None)
    try:
        await caller.connect()
        created = await caller.event("session.created")
        assert (await caller.hangup()).status_code == 200
        assert (await caller.event("session.closed", within=10))["reason"] == "hangup"
    finally:
        await caller.close()
    service = voice_service(server)
    deadline = time.monotonic() + 15
    while service.calls.calls or service.engine.runners:
        assert time.monotonic() < deadline, "the hung-up call was not freed"
        await asyncio.sleep(0.1)
    assert created["session"]["id"] not in service.engine.parked


def caller_of(server: ServerThread, key: str | None = None) -> Caller:
    caller = Caller(server.http_url, key)
    OPENED.append(caller)
    return caller


def resume_event(session_id: str, token: str, last_seq: int) -> dict[str, Any]:
    return {
        "type": "session.resume",
        "session_id": session_id,
        "resume_token": token,
        "last_event_seq": last_seq,
    }


async def open_socket(server: ServerThread, query: str) -> Any:
    ws = await websockets.connect(f"{server.ws_url}/v1/realtime?{query}")
    OPENED.append(ws)
    return ws


async def drop(ws: Any) -> None:
    """Lose the socket without a close frame, as a network drop does."""
    ws.transport.abort()
    with contextlib.suppress(Exception):
        await ws.wait_closed()


async def parked_socket_session(
    server: ServerThread, *steps: tuple[dict[str, Any], str]
) -> tuple[str, str, int]:
    """A socket's session, taken through ``steps`` (an event, and the type that answers it), then
    dropped and parked: its id, its resume token and how many events the socket got."""
    ws = await open_socket(server, "model=scripted-voice")
    events: list[dict[str, Any]] = []
    created = await recv_until(ws, "session.created", events)
    for event, answer in steps:
        await ws.send(json.dumps(event))
        await recv_until(ws, answer, events)
    await drop(ws)
    await until_parked(server, created["session"]["id"])
    return created["session"]["id"], created["resume_token"], len(events)


async def resume_socket(
    server: ServerThread, session_id: str, token: str, last_seq: int
) -> tuple[Any, dict[str, Any]]:
    """A socket resuming ``session_id``, and its answer (``session.resumed``, or an error)."""
    ws = await open_socket(server, f"session_id={session_id}")
    await ws.send(json.dumps(resume_event(session_id, token, last_seq)))
    return ws, await recv_until(ws, "session.resumed", [])


async def answer_on_the_track(caller: Caller) -> None:
    """The resumed session answers on this call's track, not as audio events on its channel."""
    asked = time.monotonic()
    caller.send({"type": "response.create"})
    started = await caller.event("output_audio_buffer.started", within=20)
    stopped = await caller.event("output_audio_buffer.stopped", within=20)
    assert started["response_id"] == stopped["response_id"]
    assert not [e for e in caller.events if e["type"] == "response.output_audio.delta"]
    assert loudness(caller.audio_since(asked)) > 1000


async def the_kept_item(caller: Caller) -> str:
    caller.send({"type": "conversation.item.retrieve", "item_id": "item_kept"})
    retrieved = await caller.event("conversation.item.retrieved", within=20)
    return str(retrieved["item"]["content"][0]["text"])


async def test_a_peer_gone_silent_parks_its_session_for_a_resume(server: ServerThread) -> None:
    """A page that navigated away is often never seen closing by ICE: only its silence tells. Its
    call is let go after the watchdog's 5 s and its session parks, as a reload's does; the page's
    resuming offer takes it back (before, the silence ended the session: nothing to resume)."""
    first = caller_of(server)
    await first.connect(session=MANUAL)
    created = await first.event("session.created")
    session_id, token = created["session"]["id"], created["resume_token"]

    async def mute_forever() -> None:
        await asyncio.Event().wait()

    first.microphone.recv = mute_forever  # the connection stays up; no packet comes
    await until_parked(server, session_id)
    assert not [e for e in first.events if e["type"] == "session.closed"], first.events
    second = caller_of(server)
    await second.take_back(resume_event(session_id, token, len(first.events)))
    resumed = await second.event("session.resumed", within=20)
    assert resumed["session_id"] == session_id and resumed["latest_seq"] == len(first.events), resumed


async def test_a_reloaded_page_resumes_its_call_on_a_new_call(server: ServerThread) -> None:
    first = caller_of(server)
    await first.connect(session=MANUAL)
    created = await first.event("session.created")
    session_id, token = created["session"]["id"], created["resume_token"]
    first.send({"type": "conversation.item.create", "item": KEPT})
    await first.wait_for(lambda e: e["type"] == "conversation.item.done", 15, "the item")
    seen = len(first.events)  # every event so far is the session's (no answer has played)
    await first.close()  # a reload: no hangup, no session.close
    await until_parked(server, session_id)

    # The page names one event fewer than it got: that one is sent again, nothing else is.
    second = caller_of(server, mint(server.http_url)["value"])  # any key a call takes: ephemeral too
    await second.take_back(resume_event(session_id, token, seen - 1))
    resumed = await second.event("session.resumed", within=20)
    assert second.events[0] is resumed, second.events[:3]
    assert resumed["replay_from_seq"] == resumed["latest_seq"] == seen, resumed
    assert resumed["resume_token"] != token
    replayed = await second.wait_for(lambda e: e is not resumed, 20, "the replay")
    assert replayed["event_id"] == first.events[seen - 1]["event_id"], replayed
    assert await the_kept_item(second) == "remember me"  # the same conversation
    await answer_on_the_track(second)
    ids = [e["event_id"] for e in second.events]
    assert len(ids) == len(set(ids)), "an event arrived twice"
    assert not [e for e in second.events if e["type"] in ("session.created", "error")], second.events

    # The token was single-use: the old one takes nothing, on a call as on a socket.
    again = await caller_of(server).offer(resume=resume_event(session_id, token, 0))
    assert again.status_code == 400 and again.json()["error"]["code"] == "invalid_resume_token", again.text
    _, refused = await resume_socket(server, session_id, token, 0)
    assert refused["type"] == "error" and refused["error"]["code"] == "invalid_resume_token", refused
    gone = await caller_of(server).offer(resume=resume_event("sess_0000000000000000", token, 0))
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "session_not_found", gone.text
    assert second.events[-1]["type"] != "session.closed"  # none of that touched the live call
    assert (await second.hangup()).status_code == 200  # with the key that resumed it
    assert (await second.event("session.closed", within=10))["reason"] == "hangup"


async def test_a_call_resumes_a_socket_session_and_a_socket_resumes_it_back(server: ServerThread) -> None:
    session_id, token, num_events = await parked_socket_session(
        server,
        ({"type": "session.update", "session": MANUAL}, "session.updated"),
        ({"type": "conversation.item.create", "item": KEPT}, "conversation.item.done"),
    )
    caller = caller_of(server)
    await caller.take_back(resume_event(session_id, token, num_events))
    resumed = await caller.event("session.resumed", within=20)
    assert resumed["latest_seq"] == num_events, resumed  # nothing to replay
    assert await the_kept_item(caller) == "remember me"
    await answer_on_the_track(caller)
    # On the call, the session's formats are the track's (promise V12): a change is refused.
    caller.send({"type": "session.update", "event_id": "ev_pcmu", "session": PCMU})
    refused = await caller.wait_for(lambda e: e["type"] == "error", 20, "the refusal")
    assert refused["error"]["code"] == "invalid_value", refused
    assert refused["error"]["param"] == "session.audio.output.format", refused

    # The call is lost in turn; a socket takes the session back, and may change its formats again.
    counted = ("output_audio_buffer.stopped", "output_audio_buffer.cleared")
    seen = num_events + len([e for e in caller.events[1:] if e["type"] not in counted])
    await caller.close()
    await until_parked(server, session_id)
    ws, greeting = await resume_socket(server, session_id, resumed["resume_token"], seen)
    assert greeting["type"] == "session.resumed" and greeting["latest_seq"] == seen, greeting
    await ws.send(json.dumps({"type": "session.update", "session": PCMU}))
    updated = await recv_until(ws, "session.updated", [])
    assert updated["session"]["audio"]["output"]["format"]["type"] == "audio/pcmu", updated


async def test_a_call_cannot_take_a_session_its_track_cannot_carry(server: ServerThread) -> None:
    session_id, token, num_events = await parked_socket_session(
        server, ({"type": "session.update", "session": PCMU}, "session.updated")
    )
    caller = caller_of(server)
    await caller.take_back(resume_event(session_id, token, num_events))
    refused = await caller.wait_for(lambda e: e["type"] in ("error", "session.resumed"), 20, "an answer")
    assert refused["type"] == "error" and refused["error"]["code"] == "invalid_resume", refused
    assert "audio/pcmu" in refused["error"]["message"], refused
    # The session stays parked, its token good: a socket takes it.
    _, greeting = await resume_socket(server, session_id, token, num_events)
    assert greeting["type"] == "session.resumed", greeting


async def raw_offer(
    server: ServerThread, params: dict[str, str], *, audio_only: bool = False, **parts: Any
) -> httpx.Response:
    """An offer posted by hand, with exactly ``parts`` (JSON) beside its ``sdp`` (``audio_only``:
    without its data channel's section)."""
    caller = caller_of(server)
    caller.pc.addTrack(caller.microphone)
    await caller.pc.setLocalDescription(await caller.pc.createOffer())
    sdp = caller.pc.localDescription.sdp
    if audio_only:
        sdp = sdp[: sdp.index("m=application ")]
    files = {"sdp": (None, sdp)}
    files |= {name: (None, json.dumps(part)) for name, part in parts.items()}
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(f"{server.http_url}/v1/realtime/calls", files=files, params=params)


async def test_a_resuming_offer_is_checked_before_anything_is_claimed(server: ServerThread) -> None:
    first = caller_of(server)
    await first.connect()
    created = await first.event("session.created")
    session_id, token = created["session"]["id"], created["resume_token"]
    resume = resume_event(session_id, token, 0)
    at = {"session_id": session_id}
    cases = [
        await raw_offer(server, at),  # no resume part
        await raw_offer(server, {}, resume=resume),  # no ?session_id=
        await raw_offer(server, {"session_id": "sess_0000000000000000"}, resume=resume),  # another session
        await raw_offer(server, at, resume=resume, session=MANUAL),  # a resume takes the session as it is
    ]
    for refused in cases:
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_resume", (
            refused.text
        )
    # Its greeting and replay go on the data channel: an offer without one cannot resume.
    mute = await raw_offer(server, at, audio_only=True, resume=resume)
    assert mute.status_code == 400 and "data channel" in mute.json()["error"]["message"], mute.text
    # None of them claimed the token: it still takes the session (live here: the old call is replaced).
    second = caller_of(server)
    await second.take_back(resume_event(session_id, token, len(first.events)))
    assert (await second.event("session.resumed", within=20))["latest_seq"] >= 1
    calls = voice_service(server).calls.calls
    deadline = time.monotonic() + 20
    while first.call_id in calls:  # the replaced call is let go
        assert time.monotonic() < deadline, "the replaced call was kept"
        await asyncio.sleep(0.1)
    assert second.call_id in calls
