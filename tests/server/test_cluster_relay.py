"""Requests relayed between a cluster's processes: a world call's hangup reaches the process
that holds the call, whichever process it lands on, and an owner slow to answer is waited for,
not taken for gone (``cluster/gate.py``, ``cluster/forward.py``).

Real processes, as in ``test_cluster.py`` (``cluster_harness.py``): two server processes on
Ray's two-node test cluster, each driven through its own private port.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from typing import Any

import cluster_harness as harness
import httpx
import pytest
import websockets
from cluster_harness import OPENED, Cluster, drop, http, recv, start_answer

from livegen.cluster.forward import CONNECT_TIMEOUT_S, OWNER_ANSWER_TIMEOUT_S

pytest.importorskip("ray")

close_clients = pytest.fixture(autouse=True)(harness.close_clients)
ray_nodes = pytest.fixture(scope="module")(harness.ray_nodes)
cluster = pytest.fixture(scope="module")(harness.cluster)


async def test_a_world_calls_hangup_through_the_other_process_reaches_it(cluster: Cluster) -> None:
    """A world call's media flows to the process that answered it; its id names that process, so
    a hangup posted to the other process is relayed there and ends the call."""
    pytest.importorskip("aiortc")
    from livegen.client.world_call import WorldCaller

    one, other = cluster.processes()
    caller = WorldCaller(http(one["address"]))
    try:
        await caller.connect()
        caller.send({"type": "session.update", "session": {"seed": 1}})
        await caller.event("session.created")
        assert caller.call_id is not None and caller.call_id[4:8] == one["tag"]  # the owner is in the id
        closed = asyncio.Event()
        caller.channel.on("close", closed.set)
        async with httpx.AsyncClient(timeout=10) as client:
            unknown = await client.post(f"{http(other['address'])}/v1/worlds/calls/rtc_nobody/hangup")
            answer = await client.post(f"{http(other['address'])}/v1/worlds/calls/{caller.call_id}/hangup")
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "call_not_found"
        assert answer.status_code == 200, answer.text
        async with asyncio.timeout(20):  # the owner lets the call go
            await closed.wait()
    finally:
        await caller.close()


async def test_an_owner_slow_to_answer_is_waited_for(cluster: Cluster) -> None:
    """A process whose loop is stalled for longer than a connection takes (here: stopped, then
    let go) is alive, with its sessions and calls: a resume and a hangup through the other
    process wait for it and reach them, never answered as for an unknown id."""
    pytest.importorskip("aiortc")
    from livegen.client.world_call import WorldCaller

    one, other = cluster.processes()
    ws, before = await start_answer(one["address"])
    session_id, token = before[0]["session"]["id"], before[0]["resume_token"]
    await drop(ws)
    caller = WorldCaller(http(one["address"]))
    try:
        await caller.connect()
        assert caller.call_id is not None
        url = f"{http(other['address'])}/v1/worlds/calls/{caller.call_id}/hangup"
        os.kill(one["pid"], signal.SIGSTOP)
        try:
            greeting, answer, _ = await asyncio.gather(
                resume_within(other["address"], session_id, token, len(before)),
                hangup_within(url),
                let_go(one["pid"]),
            )
        finally:
            os.kill(one["pid"], signal.SIGCONT)
        assert greeting["type"] == "session.resumed", greeting
        assert answer.status_code == 200, answer.text
    finally:
        await caller.close()


async def let_go(pid: int) -> None:
    """Let a stopped process go on: later than a connection may take, sooner than a busy owner
    is waited for."""
    await asyncio.sleep((CONNECT_TIMEOUT_S + OWNER_ANSWER_TIMEOUT_S) / 2)
    os.kill(pid, signal.SIGCONT)


async def resume_within(address: str, session_id: str, token: str, last_seq: int) -> dict[str, Any]:
    """A resume's first answer, the handshake waited for as long as the relay may take."""
    ws = await websockets.connect(f"{address}/v1/realtime?session_id={session_id}", open_timeout=30)
    OPENED.append(ws)
    message = {"type": "session.resume", "session_id": session_id, "resume_token": token}
    await ws.send(json.dumps({**message, "last_event_seq": last_seq}))
    return await recv(ws)


async def hangup_within(url: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(url)
