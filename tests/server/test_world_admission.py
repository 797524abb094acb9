"""Realtime admission over the wire (issue 39): what a batch costs decides, asap sessions are free.

procedural-world steps in well under a millisecond, so the scheduler's measured
costs are set here to a machine that fits one realtime session and not two
(the real scheduler, runner and sockets decide from them); the figures on a
real model are ``livegen bench world-stream``'s (docs/capacity.md).
"""

from __future__ import annotations

import pytest

from livegen.client.world import WorldClient, WorldError
from livegen.protocol import world as wire
from livegen.runtime.world.capacity import StepCosts
from livegen.server.config import ServerConfig
from livegen.server.thread import ServerThread
from livegen.server.world.service import WorldService


@pytest.fixture
def world_server() -> object:
    with ServerThread(
        ServerConfig(api_key=None, voice_model="none", world_model="procedural-world")
    ) as server:
        server.wait_ready()
        yield server


def fits_one(server: ServerThread) -> None:
    """Steps of one cost 100 ms (40% at 4 chunks a second), of two 300 ms (120%)."""
    [service] = server.app.state.livegen.services
    assert isinstance(service, WorldService) and service.engine.scheduler is not None
    costs = StepCosts(service.engine.scheduler.spec.fps)
    for _ in range(32):
        costs.record(4, 1, 0.1)
        costs.record(4, 2, 0.3)
    service.engine.scheduler.admission.costs = costs


async def test_an_asap_session_is_not_charged_until_it_asks_for_realtime(world_server: ServerThread) -> None:
    player = await WorldClient.connect(world_server.ws_url)
    batch = await WorldClient.connect(world_server.ws_url, auto_ack=False)
    late = await WorldClient.connect(world_server.ws_url)
    async with player, batch, late:
        await player.create(pacing="realtime")
        await batch.create(pacing="asap", max_chunks_ahead=1)
        await batch.next_chunk()  # then it waits for an ack it never sends: it steps no more
        fits_one(world_server)
        with pytest.raises(WorldError) as refused:  # the realtime one is alone in its batches
            await late.create(pacing="realtime")
        assert refused.value.code == "realtime_capacity"
        await batch.send({"type": "session.update", "session": {"pacing": "realtime"}})
        with pytest.raises(WorldError) as switched:
            await batch.expect(wire.SessionUpdated)
        assert switched.value.code == "realtime_capacity"
        await batch.send({"type": "session.update", "session": {"max_chunks_ahead": 2}})
        updated = await batch.expect(wire.SessionUpdated)
        assert updated.session["pacing"] == "asap"  # the refused switch changed nothing
        assert (await player.next_chunk()).header.chunk_index >= 0  # the player goes on
