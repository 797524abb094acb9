"""Requests relayed between a cluster's processes: a world call's hangup reaches the process
that holds the call, whichever process it lands on (``server/gate.py``, ``server/forward.py``).

Real processes, as in ``test_cluster.py`` (``cluster_harness.py``): two server processes on
Ray's two-node test cluster, each driven through its own private port.
"""

from __future__ import annotations

import asyncio

import cluster_harness as harness
import httpx
import pytest
from cluster_harness import Cluster, http

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
