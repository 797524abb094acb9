"""A session's own chunk length over the wire: ``session.update`` ``frames_per_chunk`` (issue 30).

With the server's defaults a page got 4-frame chunks, so an input waited up
to 250 ms for the next chunk (input -> shown 202 / 304 ms p50 / p95 for
tiny-world); the interactive figure needed ``--world-frames-per-chunk 1`` for
every session of the server. Now the page asks for one frame a chunk at
creation; other sessions keep the model's length. procedural-world renders the
room game exactly, so the frames can be compared across lengths.
"""

from __future__ import annotations

import numpy as np
import pytest

from livegen.client.world import WorldClient, WorldError
from livegen.protocol import world as wire
from livegen.server.config import ServerConfig
from livegen.server.thread import ServerThread


@pytest.fixture(scope="module")
def world_server() -> object:
    with ServerThread(
        ServerConfig(api_key=None, voice_model="none", world_model="procedural-world")
    ) as server:
        server.wait_ready()
        yield server


async def frames_of(client: WorldClient, count: int) -> list[np.ndarray]:
    frames: list[np.ndarray] = []
    while len(frames) < count:
        frames.extend((await client.next_chunk()).frames)
    return frames[:count]


async def test_a_session_asks_for_one_frame_chunks_beside_one_with_the_models(
    world_server: ServerThread,
) -> None:
    short = await WorldClient.connect(world_server.ws_url)
    full = await WorldClient.connect(world_server.ws_url)
    async with short, full:
        created = await short.create(pacing="asap", seed=7, frames_per_chunk=1)
        assert (created["frames_per_chunk"], created["first_chunk_frames"]) == (1, 1)
        assert (await full.create(pacing="asap", seed=7))["frames_per_chunk"] == 4
        chunks = [await short.next_chunk() for _ in range(6)]
        assert [c.header.chunk_index for c in chunks] == list(range(6))
        assert [c.header.num_frames for c in chunks] == [1] * 6
        assert [c.header.media_time_ms for c in chunks] == [k * 62.5 for k in range(6)]
        alone = await frames_of(full, 8)
        ones = [chunk.frames[0] for chunk in chunks] + await frames_of(short, 2)
        assert all(np.array_equal(a, b) for a, b in zip(ones, alone, strict=True)), (
            "the same world, frame by frame"
        )


async def test_an_event_lands_in_the_next_one_frame_chunk(world_server: ServerThread) -> None:
    client = await WorldClient.connect(world_server.ws_url)
    async with client:
        await client.create(pacing="asap", max_chunks_ahead=1, frames_per_chunk=1)
        await client.next_chunk()
        await client.action(1, "right")
        chunk = await client.next_chunk()
        while 1 not in chunk.header.applied_event_ids:
            chunk = await client.next_chunk()
        assert chunk.header.num_frames == 1


@pytest.mark.parametrize(("asked", "effective"), [(2, 2), (4, 4), (16, 4)])
async def test_the_model_makes_the_nearest_length_it_can(
    world_server: ServerThread, asked: int, effective: int
) -> None:
    client = await WorldClient.connect(world_server.ws_url)
    async with client:
        assert (await client.create(frames_per_chunk=asked))["frames_per_chunk"] == effective
        assert (await client.next_chunk()).header.num_frames == effective


async def test_the_chunk_length_is_fixed_once_the_session_exists(world_server: ServerThread) -> None:
    client = await WorldClient.connect(world_server.ws_url)
    async with client:
        with pytest.raises(WorldError) as refused:
            await client.create(frames_per_chunk=0)
        assert refused.value.code == "invalid_request"
        await client.create(frames_per_chunk=1)
        await client.send({"type": "session.update", "session": {"frames_per_chunk": 1}})
        assert (await client.expect(wire.SessionUpdated)).session["frames_per_chunk"] == 1
        await client.send({"type": "session.update", "session": {"frames_per_chunk": 4}})
        error = await client.expect(wire.Error)
        assert (error.error.code, error.error.param) == ("invalid_request", "session.frames_per_chunk")
        assert (await client.next_chunk()).header.num_frames == 1, "the session goes on as it was"
