"""Real Ray workers over the real server: the same frames as in process, and state released on close.

One local Ray (2 CPUs, no dashboard) for the whole module: starting it takes
seconds. The server runs ``procedural-world`` in two Ray actors
(``world_workers=2``); a second server runs it in process, as the baseline.
Events reach the same chunks in both because the client holds flow control
(``max_chunks_ahead=1``, no auto-ack), as in ``test_worlds_determinism.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from livegen.client.world import WorldClient
from livegen.cluster.world_actors import RayWorker
from livegen.protocol import world as wire
from livegen.server import ServerConfig
from livegen.server.thread import ServerThread
from livegen.server.world.service import WorldService

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

ACTION = {"track": "action", "schema": "livegen.action.v1"}
SCRIPT: list[dict[str, Any]] = [
    {"controls": [{**ACTION, "data": {"action": "right"}}]},
    {"prompt": "a frozen snow field"},
    {"controls": [{**ACTION, "data": {"action": "down"}}]},
    {},
    {"prompt": "into the lava", "controls": [{**ACTION, "data": {"action": "left"}}]},
    {},
]
Recording = list[tuple[list[int], list[np.ndarray]]]
Checkpoint = Callable[[], Awaitable[None]]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    # A Ray of this test's own: never join one another process runs on the machine.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def ray_server(ray_cluster: None) -> Iterator[ServerThread]:
    config = ServerConfig(api_key=None, voice_model="none", world_model="procedural-world", world_workers=2)
    with ServerThread(config) as server:
        server.wait_ready()
        yield server


@pytest.fixture(scope="module")
def local_server() -> Iterator[ServerThread]:
    config = ServerConfig(api_key=None, voice_model="none", world_model="procedural-world")
    with ServerThread(config) as server:
        server.wait_ready()
        yield server


def ray_workers(server: ServerThread) -> list[RayWorker]:
    [service] = server.app.state.livegen.services
    assert isinstance(service, WorldService) and service.engine.scheduler is not None
    workers = service.engine.scheduler.workers.workers
    assert all(isinstance(worker, RayWorker) for worker in workers)
    return workers  # type: ignore[return-value]


async def held(server: ServerThread) -> list[list[str]]:
    """The sessions each Ray actor holds state for, asked of the actors themselves."""
    return list(await asyncio.gather(*(worker.held_sessions() for worker in ray_workers(server))))


async def play(server: ServerThread, seed: int, checkpoint: Checkpoint | None = None) -> Recording:
    """Play ``SCRIPT``; ``checkpoint`` is awaited once the first chunk is in."""
    client = await WorldClient.connect(server.ws_url, auto_ack=False)
    chunks: Recording = []
    async with client:
        await client.create(
            seed=seed, prompt="forest", pacing="asap", max_chunks_ahead=1, output={"format": "png"}
        )
        for event_id, step in enumerate(SCRIPT, start=1):
            chunk = await client.next_chunk()
            chunks.append((chunk.header.applied_event_ids, chunk.frames))
            if checkpoint is not None and event_id == 1:
                await checkpoint()
            if step:
                await client.event(event_id, **step)
            await client.send({"type": "chunk.ack", "chunk_index": chunk.header.chunk_index})
        chunk = await client.next_chunk()
        chunks.append((chunk.header.applied_event_ids, chunk.frames))
        await client.close()
    return chunks


def assert_same_frames(first: Recording, second: Recording) -> None:
    assert [ids for ids, _ in first] == [ids for ids, _ in second]
    for (_, a), (_, b) in zip(first, second, strict=True):
        assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


async def test_ray_workers_give_the_same_frames_as_in_process(
    ray_server: ServerThread, local_server: ServerThread
) -> None:
    both_started, looked = asyncio.Barrier(3), asyncio.Event()

    async def checkpoint() -> None:  # both sessions are open while the test looks at the actors
        await both_started.wait()
        await looked.wait()

    async with asyncio.timeout(60):
        playing = asyncio.gather(play(ray_server, 11, checkpoint), play(ray_server, 12, checkpoint))
        await both_started.wait()
        placed = await held(ray_server)
        looked.set()
        on_ray = await playing
    assert sorted(len(sessions) for sessions in placed) == [1, 1], "two sessions, one on each actor"
    in_process = [await play(local_server, seed=11), await play(local_server, seed=12)]
    for remote, local in zip(on_ray, in_process, strict=True):
        assert_same_frames(remote, local)
    assert [ids for ids, _ in on_ray[0]][1:] == [[1], [2], [3], [], [5], []]
    assert not np.array_equal(on_ray[0][0][1][0], on_ray[1][0][1][0]), "seeds 11 and 12 differ"
    assert await held(ray_server) == [[], []], "closed sessions hold no state on any actor"


async def test_close_and_disconnect_release_the_session_on_its_actor(ray_server: ServerThread) -> None:
    client = await WorldClient.connect(ray_server.ws_url)
    created = await client.create(seed=3, pacing="asap", max_chunks_ahead=2)
    await client.next_chunk()
    assert [created["id"]] in await held(ray_server)
    await client.reset()
    while (await client.next_chunk()).header.chunk_index != 0:
        pass  # chunks of the rollout before the reset
    assert sum(created["id"] in sessions for sessions in await held(ray_server)) == 1
    await client.close()
    await client.disconnect()
    assert await held(ray_server) == [[], []]

    client = await WorldClient.connect(ray_server.ws_url)
    created = await client.create(seed=4, pacing="asap", max_chunks_ahead=2)
    await client.next_chunk()
    assert [created["id"]] in await held(ray_server)
    await client.disconnect()  # no session.close: the server must release it anyway
    for _ in range(200):
        if await held(ray_server) == [[], []]:
            break
        await asyncio.sleep(0.05)
    assert await held(ray_server) == [[], []]


async def test_a_lost_actor_fails_its_sessions_which_move_to_a_live_actor_on_reset(
    ray_server: ServerThread,
) -> None:
    """Kills an actor of the module's server: keep this test last in the module."""
    client = await WorldClient.connect(ray_server.ws_url, auto_ack=False)
    async with client:
        created = await client.create(seed=6, pacing="asap", max_chunks_ahead=1)
        await client.next_chunk()
        holding = zip(ray_workers(ray_server), await held(ray_server), strict=True)
        [lost] = [worker for worker, sessions in holding if sessions]
        ray.kill(lost.actor, no_restart=True)
        await until_dead(lost)
        await client.send({"type": "chunk.ack", "chunk_index": 0})
        error = await client.expect(wire.Error)
        assert error.error.code == "chunk_failed"
        await client.reset()
        chunk = await client.next_chunk()
        assert chunk.header.chunk_index == 0
        [live] = [w for w in ray_workers(ray_server) if w is not lost]
        assert await live.held_sessions() == [created["id"]]
        async with httpx.AsyncClient() as http:
            health = (await http.get(f"{ray_server.http_url}/health")).json()["services"]["world"]
        assert health["ready"] is True and health["workers_lost"] == [lost.name]
        await client.close()
        assert await live.held_sessions() == []


async def until_dead(worker: RayWorker) -> None:
    """``ray.kill`` returns before the actor is gone: wait until calls to it fail."""
    for _ in range(200):
        try:
            await worker.actor.held_sessions.remote()
        except ray.exceptions.RayActorError:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{worker.name} did not die")
