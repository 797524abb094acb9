"""Model-side failures seen from the wire: eviction is visible (upstream gap 3), failed means reset."""

from __future__ import annotations

import pytest

from livegen.client.world import WorldClient
from livegen.protocol import world as wire
from livegen.server.thread import ServerThread
from livegen.server.worlds import WorldService


@pytest.fixture(scope="module")
def world_server() -> object:
    with ServerThread() as server:
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
        model = service_of(world_server).model
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
        service_of(world_server).model.release(created["id"])  # type: ignore[union-attr]
        await doomed.send({"type": "chunk.ack", "chunk_index": 0})
        assert (await doomed.expect(wire.Error)).error.code == "state_evicted"
        first = (await healthy.next_chunk()).header.chunk_index
        assert (await healthy.next_chunk()).header.chunk_index == first + 1
