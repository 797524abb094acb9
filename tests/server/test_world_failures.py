"""Model-side failures seen from the wire: eviction is visible (upstream gap 3), failed means reset."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from livegen.client.world import WorldClient
from livegen.protocol import world as wire
from livegen.server.config import ServerConfig
from livegen.server.thread import ServerThread
from livegen.server.world.service import WorldService


@pytest.fixture(scope="module")
def world_server() -> object:
    # pinned: these tests check procedural-world's exact frames and state (whatever the default is)
    with ServerThread(ServerConfig(api_key=None, world_model="procedural-world")) as server:
        server.wait_ready()
        yield server


def service_of(server: ServerThread) -> WorldService:
    [service] = [s for s in server.app.state.livegen.services if isinstance(s, WorldService)]
    return service


async def test_evicted_state_fails_the_session_with_a_clear_code(world_server: ServerThread) -> None:
    client = await WorldClient.connect(world_server.ws_url, auto_ack=False)
    async with client:
        created = await client.create(pacing="asap", max_chunks_ahead=1)
        assert (await client.next_chunk()).header.chunk_index == 0
        model = service_of(world_server).engine.model
        assert model is not None
        model.release(created["id"])  # the model forgets the session behind its back
        await client.send({"type": "chunk.ack", "chunk_index": 0})
        error = await client.expect(wire.Error)
        assert error.error.code == "state_evicted"
        await client.send({"type": "world.event", "event_id": 1, "prompt": "x"})
        refused = await client.expect(wire.Error)
        assert refused.error.code == "session_failed" and refused.error.event_id == 1
        await client.reset()
        assert (await client.next_chunk()).header.chunk_index == 0, "the world restarts only on reset"


async def test_other_sessions_go_on_when_one_fails(world_server: ServerThread) -> None:
    healthy = await WorldClient.connect(world_server.ws_url)
    doomed = await WorldClient.connect(world_server.ws_url, auto_ack=False)
    async with healthy, doomed:
        await healthy.create(pacing="asap")
        created = await doomed.create(pacing="asap", max_chunks_ahead=1)
        await doomed.next_chunk()
        service_of(world_server).engine.model.release(created["id"])  # type: ignore[union-attr]
        await doomed.send({"type": "chunk.ack", "chunk_index": 0})
        assert (await doomed.expect(wire.Error)).error.code == "state_evicted"
        first = (await healthy.next_chunk()).header.chunk_index
        assert (await healthy.next_chunk()).header.chunk_index == first + 1


async def test_a_failed_step_is_chunk_failed_until_reset(
    world_server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await WorldClient.connect(world_server.ws_url, auto_ack=False)
    async with client:
        await client.create(pacing="asap", max_chunks_ahead=1)
        await client.next_chunk()
        await client.event(1, prompt="ocean")
        model = service_of(world_server).engine.model
        assert model is not None

        def broken(ticks: object, kv: object) -> None:
            raise RuntimeError("out of memory")

        monkeypatch.setattr(model, "step", broken)
        await client.send({"type": "chunk.ack", "chunk_index": 0})
        error = await client.expect(wire.Error)
        assert error.error.code == "chunk_failed" and "out of memory" in error.error.message
        monkeypatch.undo()
        await client.send({"type": "world.event", "event_id": 2, "prompt": "x"})
        assert (await client.expect(wire.Error)).error.code == "session_failed"
        await client.reset()
        chunk = await client.next_chunk()
        assert chunk.header.chunk_index == 0 and chunk.header.applied_event_ids == []


async def test_disconnect_releases_the_model_state(world_server: ServerThread) -> None:
    model = service_of(world_server).engine.model
    assert model is not None
    client = await WorldClient.connect(world_server.ws_url)
    created = await client.create(pacing="asap")
    await client.next_chunk()
    assert created["id"] in model._games  # type: ignore[attr-defined]
    await client.disconnect()
    async with asyncio.timeout(5):
        while created["id"] in model._games:  # type: ignore[attr-defined]  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def test_jpeg_and_realtime_pacing(world_server: ServerThread) -> None:
    client = await WorldClient.connect(world_server.ws_url)
    async with client:
        created = await client.create(output={"format": "jpeg", "quality": 90})
        assert created["pacing"] == "realtime"
        chunks = [await client.next_chunk() for _ in range(2)]
        assert [c.header.chunk_index for c in chunks] == [0, 1]
        assert all(raw[:2] == b"\xff\xd8" for raw in chunks[0].raw), "JPEG frames"
        assert chunks[0].frames[0].shape == (32, 32, 3)


def test_too_many_sessions_is_refused_cleanly(start_server: Callable[..., ServerThread]) -> None:
    server = start_server(max_sessions=1)
    server.wait_ready()

    async def scenario() -> None:
        first = await WorldClient.connect(server.ws_url)
        second = await WorldClient.connect(server.ws_url)
        async with first, second:
            await first.create(pacing="asap")
            await second.send({"type": "session.update", "session": {}})
            error = await second.expect(wire.Error)
            assert error.error.code == "too_many_sessions"
            await first.close()
            await second.create(pacing="asap")

    asyncio.run(scenario())
