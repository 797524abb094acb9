"""A world model loaded once per cluster (``cluster/world.py``): two server processes on
Ray's two-node test cluster call one world service, whose KV pool admits sessions for both
together, and which frees a killed process's sessions.

The model (``cluster_world_models.py``) is the procedural room game declaring KV pages so large
that the service's default budget admits two sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import cluster_harness as harness
import pytest
from cluster_harness import HERE, Cluster, RayNodes, env, free_port, health, stop, wait_for

from livegen.client.world import WorldClient, WorldError
from livegen.protocol import world as wire

pytest.importorskip("ray")

ray_nodes = pytest.fixture(scope="module")(harness.ray_nodes)
MODEL = "paged-world"
OPENED: list[WorldClient] = []


@pytest.fixture(autouse=True)
async def close_worlds(world_cluster: Cluster) -> Any:
    """Each test's sessions end with it, and leave the service before the next test begins."""
    yield
    while OPENED:
        with contextlib.suppress(Exception):  # a client of a killed process is gone already
            await asyncio.wait_for(OPENED.pop().disconnect(), 10)
    for _ in range(100):
        if all(s["sessions"] == 0 for s in world_services(world_cluster.port)):
            return
        await asyncio.sleep(0.2)


@pytest.fixture(scope="module")
def world_cluster(ray_nodes: RayNodes) -> Iterator[Cluster]:
    """``livegen serve --workers 2`` of the paged world (``--world-workers`` 0: one shared service)."""
    port = free_port()
    options = {"api_key": None, "voice_model": "none", "world_model": MODEL, "workers": 2, "port": port}
    options |= {"ray_address": ray_nodes.address, "drain_timeout_s": 1.0}
    command = [sys.executable, str(HERE / "cluster_world_models.py"), json.dumps(options)]
    serve = subprocess.Popen(command, env=env(), start_new_session=True)
    try:
        body = wait_for(port, lambda b: len(b["cluster"]["processes"]) == 2)
        cluster = Cluster(port, body["cluster"]["group"], serve)
        for process in cluster.processes():  # each ready: attached to the world service
            wait_for(private_port(process), lambda b: b["services"]["world"]["ready"])
        yield cluster
    finally:
        stop(serve)


def private_port(process: dict[str, Any]) -> int:
    return int(process["address"].rsplit(":", 1)[1])


def world_services(port: int) -> list[dict[str, Any]]:
    services = health(port).json()["cluster"]["services"]
    return [s for s in services if s["name"].startswith("livegen-world-")]


async def open_world(address: str, seed: int) -> WorldClient:
    client = await WorldClient.connect(address)
    OPENED.append(client)
    await client.create(seed=seed, pacing="realtime")
    return client


async def refused(address: str) -> str:
    """The code a new session on ``address`` is refused with ("" if it was created)."""
    try:
        await open_world(address, seed=99)
    except WorldError as error:
        return error.code
    return ""


async def admitted(address: str) -> WorldClient:
    """A new session on ``address`` once the service has room. A closed session's admission goes
    back right after its ``session.closed`` (its process tells the service without waiting), and a
    dead process's once the cluster no longer lists it: each a moment later."""
    for _ in range(60):
        try:
            return await open_world(address, seed=3)
        except WorldError as error:
            assert error.code == "kv_pool_full"
        await asyncio.sleep(0.5)
    raise AssertionError("the service's pool stayed full")


async def clocked(client: WorldClient, count: int) -> list[Any]:
    """``count`` more chunks of ``client``'s session, on its frame clock from its first chunk."""
    return [(await client.next_chunk(wait_s=30)).header for _ in range(count)]


def assert_on_clock(headers: list[Any], session: dict[str, Any]) -> None:
    chunk_ms = 1000 * session["frames_per_chunk"] / session["fps"]
    assert [h.chunk_index for h in headers] == list(range(len(headers)))
    assert [h.media_time_ms for h in headers] == [i * chunk_ms for i in range(len(headers))]


async def test_both_processes_stream_from_one_world_service(world_cluster: Cluster) -> None:
    one, other = world_cluster.processes()
    first = await open_world(one["address"], seed=1)
    second = await open_world(other["address"], seed=2)
    for client in (first, second):
        assert_on_clock(await clocked(client, 4), client.session)
    # one model in the cluster, holding both processes' sessions
    (service,) = world_services(world_cluster.port)
    assert service["name"] == f"livegen-world-{MODEL}-0" and service["ready"]
    assert service["sessions_by_process"] == {one["tag"]: 1, other["tag"]: 1}
    kv = health(private_port(one)).json()["services"]["world"]["kv"]
    assert kv["capacity"] == 2 and kv["shared"] == [f"livegen-world-{MODEL}-0"]
    for client in (first, second):
        await client.close()


async def test_admissions_stop_at_the_services_capacity_across_processes(world_cluster: Cluster) -> None:
    one, other = world_cluster.processes()
    first = await open_world(one["address"], seed=1)
    await open_world(other["address"], seed=2)
    # the service holds two sessions in all, however the processes share them
    assert await refused(one["address"]) == "kv_pool_full"
    assert await refused(other["address"]) == "kv_pool_full"
    await first.close()  # its pages go back: the other process may admit one
    third = await admitted(other["address"])
    assert_on_clock(await clocked(third, 2), third.session)


async def test_a_restarted_service_fails_the_chunks_it_served_and_sessions_go_on_after_reset(
    world_cluster: Cluster,
) -> None:
    one, _other = world_cluster.processes()
    client = await open_world(one["address"], seed=5)
    await clocked(client, 2)
    (service,) = world_services(world_cluster.port)
    os.kill(service["pid"], signal.SIGKILL)  # the service's process dies; Ray starts it again
    for _ in range(200):  # chunks made before the loss may still be on their way
        event = await client.next_event(wait_s=30)
        if isinstance(event, wire.Error):
            break
    assert event.error.code == "state_evicted" and "world.reset" in event.error.message
    await client.reset()  # the session goes on, on the restarted service
    for _ in range(200):
        header = (await client.next_chunk(wait_s=30)).header
        if header.chunk_index == 0:
            break
    assert_on_clock([header, *await clocked(client, 3)], client.session)
    (service,) = world_services(world_cluster.port)
    assert service["restarted"] and service["sessions"] == 1


async def test_a_killed_process_leaves_the_others_stream_and_frees_its_pages(world_cluster: Cluster) -> None:
    one, other = world_cluster.processes()
    await open_world(one["address"], seed=1)
    survivor = await open_world(other["address"], seed=2)
    headers = await clocked(survivor, 3)
    assert await refused(other["address"]) == "kv_pool_full"
    os.kill(one["pid"], signal.SIGKILL)
    headers += await clocked(survivor, 6)
    assert_on_clock(headers, survivor.session)  # the survivor kept its frame clock
    # the dead process's session leaves the service once the cluster no longer lists it
    await admitted(other["address"])
    (service,) = world_services(world_cluster.port)
    assert service["sessions_swept"] >= 1 and one["tag"] not in service["sessions_by_process"]
