"""Many server processes on one Ray cluster (``--workers``, ``--ray-address``), and the drain.

Real processes: ``livegen serve``'s supervisor (``cluster/supervisor.py``, started
through ``cluster_models.py`` so that it serves the scripted voice and the
procedural world) with two server processes on one port, joined to a Ray
cluster of two nodes (Ray's own ``cluster_utils.Cluster``, in a process of its
own: Ray's threads stay out of the tests' process). Each process also
listens on a private port, which its ``/health`` names; the tests drive each
process through its own private port, so which one a connection reaches is
never left to the kernel, and resumes owned by the other process are relayed.
The drain test runs a single process without Ray. What the cluster's test
modules share is ``cluster_harness.py``; the speech service's tests are in
``test_cluster_speech.py``, stopping and counting in ``test_cluster_stop.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from typing import Any

import cluster_harness as harness
import httpx
import pytest
import websockets
from cluster_harness import (
    MAX_SESSIONS,
    OPENED,
    Cluster,
    audio_bytes,
    drop,
    duplex,
    free_port,
    health,
    http,
    open_voice,
    recv,
    resume,
    start_answer,
    start_serve,
    stop,
    until,
    wait_for,
)

from livegen.client.world import WorldClient

pytest.importorskip("ray")

close_clients = pytest.fixture(autouse=True)(harness.close_clients)
ray_nodes = pytest.fixture(scope="module")(harness.ray_nodes)
cluster = pytest.fixture(scope="module")(harness.cluster)


async def test_a_session_opened_on_one_process_resumes_through_the_other(cluster: Cluster) -> None:
    one, other = cluster.processes()
    ws, before = await start_answer(one["address"])
    session_id, token = before[0]["session"]["id"], before[0]["resume_token"]
    assert session_id[5:9] == one["tag"]  # the owner is in the id
    await drop(ws)
    ws2 = await resume(other["address"], session_id, token, last_seq=len(before))
    greeting = await recv(ws2)
    assert greeting["type"] == "session.resumed", greeting
    assert greeting["last_event_seq"] == len(before)
    after: list[dict[str, Any]] = []
    await until(ws2, "response.done", after)
    stream = before + after
    assert [e["type"] for e in stream].count("response.done") == 1
    assert len({e["event_id"] for e in stream}) == len(stream)  # nothing twice
    assert audio_bytes(stream) == 2 * 24 * 1500  # the scripted answer whole: nothing missing
    # the session goes on through the relay: a client event reaches it and is answered
    await ws2.send(json.dumps({"type": "response.cancel", "event_id": "c1"}))
    assert (await until(ws2, "error", []))["error"]["code"] == "response_cancel_not_active"
    await ws2.close()


async def test_a_token_resumes_once_when_two_resumes_race_on_two_processes(cluster: Cluster) -> None:
    one, other = cluster.processes()
    ws, before = await start_answer(one["address"])
    session_id, token = before[0]["session"]["id"], before[0]["resume_token"]
    await drop(ws)
    racers = await asyncio.gather(
        *(resume(p["address"], session_id, token, len(before)) for p in (one, other))
    )
    firsts = [await recv(racer) for racer in racers]
    assert sorted(first["type"] for first in firsts) == ["error", "session.resumed"]


async def test_a_duplex_session_resumes_through_the_other_process(cluster: Cluster) -> None:
    """Its session id is in its first message, not the URL: the process that reads it relays it."""
    one, other = cluster.processes()
    ws = await duplex(one["address"], {"type": "session.update", "session": {"sample_rate_hz": 16_000}})
    created = await until(ws, "session.created", [])
    session_id, token = created["session"]["id"], created["resume_token"]
    assert session_id[5:9] == one["tag"]
    await ws.send(json.dumps({"type": "response.create"}))
    before = [created]
    for _ in range(3):
        await until(ws, "response.output_audio.delta", before)
    await drop(ws)
    last = before[-1]["server_event_seq"]
    resume = {"type": "session.resume", "session_id": session_id, "resume_token": token}
    ws2 = await duplex(other["address"], {**resume, "last_received_server_event_seq": last})
    resumed = await recv(ws2)
    assert resumed["type"] == "session.resumed" and resumed["session"]["id"] == session_id, resumed
    after: list[dict[str, Any]] = []
    await until(ws2, "response.done", after)
    seqs = [e["server_event_seq"] for e in before + after if "server_event_seq" in e]
    assert seqs == sorted(set(seqs)), "nothing twice, in order"
    assert [e["type"] for e in before + after].count("response.done") == 1
    await ws2.send(json.dumps({"type": "response.cancel", "event_id": "c1"}))
    assert (await until(ws2, "error", []))["error"]["code"] == "response_cancel_not_active"
    # the token was spent on the owner: a second resume through either process is refused
    for process in (other, one):
        again = await duplex(process["address"], {**resume, "last_received_server_event_seq": last})
        assert (await recv(again))["type"] == "error"


async def test_a_calls_attach_and_hangup_reach_the_process_that_holds_it(cluster: Cluster) -> None:
    """A WebRTC call stays where its media flows; its id names that process, so an attach and a
    hangup through the other process are relayed there."""
    pytest.importorskip("aiortc")
    from livegen.client.webrtc import Caller

    one, other = cluster.processes()
    other_http = other["address"].replace("ws", "http", 1)
    caller = Caller(one["address"].replace("ws", "http", 1), None)
    try:
        await caller.connect()
        created = await caller.event("session.created")
        assert caller.call_id is not None and caller.call_id[4:8] == one["tag"]
        assert created["session"]["id"][5:9] == one["tag"]
        backend = await websockets.connect(f"{other['address']}/v1/realtime?call_id={caller.call_id}")
        OPENED.append(backend)
        item = {
            "type": "message",
            "id": "item_b",
            "role": "user",
            "content": [{"type": "input_text", "text": "hi"}],
        }
        await backend.send(json.dumps({"type": "conversation.item.create", "item": item}))
        assert (await until(backend, "conversation.item.added", []))["item"]["id"] == "item_b"
        await caller.wait_for(
            lambda e: e["type"] == "conversation.item.added" and e["item"]["id"] == "item_b"
        )
        async with httpx.AsyncClient() as http:
            unknown = await http.post(f"{other_http}/v1/realtime/calls/rtc_nobody/hangup")
            answer = await http.post(f"{other_http}/v1/realtime/calls/{caller.call_id}/hangup")
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "call_not_found"
        assert answer.status_code == 200, answer.text
        assert (await caller.event("session.closed", within=10))["reason"] == "hangup"
    finally:
        await caller.close()


async def offer_through(process: dict[str, Any], resume: dict[str, Any]) -> httpx.Response:
    """A resuming call offer posted to ``process`` (its answer, not taken)."""
    from livegen.client.webrtc import Caller

    caller = Caller(http(process["address"]), None)
    OPENED.append(caller)
    return await caller.offer(resume=resume)


async def test_a_lost_call_is_taken_back_by_an_offer_to_the_other_process(cluster: Cluster) -> None:
    """A page that reloaded posts its resuming offer wherever the port sends it: the offer is
    relayed to the process that holds the session, whose answer (and so its media) comes back."""
    pytest.importorskip("aiortc")
    from livegen.client.webrtc import Caller, loudness

    one, other = cluster.processes()
    first = Caller(http(one["address"]), None)
    OPENED.append(first)
    await first.connect()
    created = await first.event("session.created")
    session_id, token = created["session"]["id"], created["resume_token"]
    assert session_id[5:9] == one["tag"]
    seen = len(first.events)
    await first.close()  # a reload: no hangup, no session.close
    resume = {"type": "session.resume", "session_id": session_id, "resume_token": token}
    second = Caller(http(other["address"]), None)
    OPENED.append(second)
    await second.take_back({**resume, "last_event_seq": seen})  # 201 and an answer, or it fails
    assert second.call_id is not None and second.call_id[4:8] == one["tag"]  # the owner's call
    resumed = await second.event("session.resumed", within=20)  # on the channel, from the owner
    assert resumed["latest_seq"] == seen and second.events[0] is resumed, second.events[:3]
    asked = time.monotonic()  # and its answer plays on this call's track, from the owner
    second.send({"type": "response.create"})
    await second.event("output_audio_buffer.stopped", within=20)
    assert loudness(second.audio_since(asked)) > 1000
    # the token was spent on the owner: the old one, through either process, is refused as there
    for process in (other, one):
        again = await offer_through(process, {**resume, "last_event_seq": 0})
        assert again.status_code == 400, again.text
        assert again.json()["error"]["code"] == "invalid_resume_token", again.text
        assert len(again.headers.get_list("date")) == 1  # the owner's head, not two servers' merged
    # a session no process holds (an unknown tag): refused at once, as for a socket
    gone = await offer_through(other, {**resume, "session_id": "sess_ffff000000000000"})
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "session_not_found", gone.text
    async with httpx.AsyncClient() as client:
        answer = await client.post(f"{http(other['address'])}/v1/realtime/calls/{second.call_id}/hangup")
    assert answer.status_code == 200, answer.text
    assert (await second.event("session.closed", within=10))["reason"] == "hangup"


async def test_max_sessions_holds_for_all_processes_together(cluster: Cluster) -> None:
    """Through the shared port (the kernel picks the process): the cap is the server's, not each
    process's, so the one past it is refused wherever it lands."""
    public = f"ws://127.0.0.1:{cluster.port}"
    for _ in range(MAX_SESSIONS):
        await open_voice(public)
    refused = await websockets.connect(f"{public}/v1/realtime?model=scripted-voice")
    OPENED.append(refused)
    assert (await recv(refused))["error"]["code"] == "too_many_sessions"
    while OPENED:  # ending them gives their room back
        await OPENED.pop().close()
    for _ in range(50):
        with contextlib.suppress(Exception):
            ws, _seen = await open_voice(public)
            await ws.close()
            return
        await asyncio.sleep(0.1)
    pytest.fail("the room of closed sessions never came back")


async def test_a_key_minted_on_one_process_opens_a_session_on_the_other(cluster: Cluster) -> None:
    one, other = cluster.processes()
    minting = "http" + one["address"][2:] + "/v1/realtime/client_secrets"
    async with httpx.AsyncClient() as http:
        answer = await http.post(minting, json={"session": {"type": "realtime", "instructions": "be brief"}})
    key = answer.json()["value"]
    headers = {"Authorization": f"Bearer {key}"}
    ws = await websockets.connect(f"{other['address']}/v1/realtime", additional_headers=headers)
    OPENED.append(ws)
    seen: list[dict[str, Any]] = []
    created = await until(ws, "session.created", seen)
    assert created["session"]["id"][5:9] == other["tag"]
    await ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime"}}))
    updated = await until(ws, "session.updated", seen)
    assert updated["session"]["instructions"] == "be brief"  # the key's configuration, learnt
    unknown = {"Authorization": "Bearer ek_never_minted"}
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(f"{other['address']}/v1/realtime", additional_headers=unknown)
    assert refused.value.response.status_code == 401


async def world_chunks(client: WorldClient, count: int) -> list[Any]:
    return [(await client.next_chunk(wait_s=30)).header for _ in range(count)]


async def test_killing_one_process_ends_only_its_sessions(cluster: Cluster) -> None:
    one, other = cluster.processes()
    doomed, doomed_seen = await open_voice(one["address"])
    doomed_duplex = await duplex(one["address"], {"type": "session.update", "session": {}})
    duplex_created = await until(doomed_duplex, "session.created", [])
    survivor, _seen = await open_voice(other["address"])
    world = await WorldClient.connect(other["address"])
    created = await world.create(seed=3, pacing="realtime")
    chunk_ms = 1000 * created["frames_per_chunk"] / created["fps"]
    headers = await world_chunks(world, 3)
    os.kill(one["pid"], signal.SIGKILL)
    with pytest.raises(websockets.ConnectionClosed):  # its client sees the socket close
        while True:
            await asyncio.wait_for(doomed.recv(), 20)
    headers += await world_chunks(world, 8)
    # the world session on the other process kept its frame clock: every chunk, none restarted
    assert [h.chunk_index for h in headers] == list(range(len(headers)))
    assert [h.media_time_ms for h in headers] == [i * chunk_ms for i in range(len(headers))]
    await world.close()
    await world.disconnect()
    # the other process's voice session goes on
    await survivor.send(json.dumps({"type": "response.create"}))
    assert (await until(survivor, "response.done", []))["response"]["status"] == "completed"
    # and a resume of the dead process's session is refused, not hung
    session_id, token = doomed_seen[0]["session"]["id"], doomed_seen[0]["resume_token"]
    late = await resume(other["address"], session_id, token, last_seq=1)
    assert (await recv(late))["error"]["code"] == "session_not_found"
    # a duplex one too (the relay finds no owner): vllm-omni's code for a session that is gone
    resume_duplex = {"type": "session.resume", "session_id": duplex_created["session"]["id"]}
    resume_duplex |= {"resume_token": duplex_created["resume_token"], "last_received_server_event_seq": 1}
    late_duplex = await duplex(other["address"], resume_duplex)
    assert (await recv(late_duplex))["error"]["code"] == "session_resume_expired"


@pytest.mark.parametrize("workers", [1, 2])
async def test_sigterm_drains_then_ends_the_rest_with_server_shutdown(workers: int) -> None:
    """One process, or the supervisor of two with its own local Ray, which passes SIGTERM on."""
    port = free_port()
    serve = start_serve(port=port, drain_timeout_s=3.0, workers=workers)
    try:
        wait_for(port, lambda b: workers == 1 or len(b["cluster"]["processes"]) == workers)
        live, _seen = await open_voice(f"ws://127.0.0.1:{port}")
        os.kill(serve.pid, signal.SIGTERM)
        for _ in range(100):
            if health(port).status_code == 503:
                break
            await asyncio.sleep(0.05)
        answer = health(port)
        assert answer.status_code == 503 and answer.json()["status"] == "draining"
        with pytest.raises(websockets.InvalidStatus) as refused:
            await websockets.connect(f"ws://127.0.0.1:{port}/v1/realtime?model=scripted-voice")
        assert refused.value.response.status_code == 503
        # the live session goes on while the server drains...
        await live.send(json.dumps({"type": "response.create"}))
        assert (await until(live, "response.done", []))["response"]["status"] == "completed"
        # ...until the drain timeout, when it ends with its terminal event
        closed = await until(live, "session.closed", [])
        assert closed.get("reason") == "server_shutdown"
        assert serve.wait(30) is not None
    finally:
        stop(serve)
