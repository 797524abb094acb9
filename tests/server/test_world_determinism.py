"""Promise W6 over the wire: same model, seed and events give the same frames; a recording replays.

Events reach the same chunks in both sessions because the client holds flow
control (``max_chunks_ahead=1``, no auto-ack): the server cannot start chunk
k+1 before the client has sent chunk k's events and acked it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from livegen.client.world import WorldClient
from livegen.models.room.procedural import ProceduralWorld
from livegen.models.world import Tick, TickMeta
from livegen.server.config import ServerConfig
from livegen.server.thread import ServerThread
from sharing import Registries

SCRIPT: list[dict[str, Any]] = [
    {"controls": [{"track": "action", "schema": "livegen.action.v1", "data": {"action": "right"}}]},
    {"prompt": "a frozen snow field"},
    {"controls": [{"track": "action", "schema": "livegen.action.v1", "data": {"action": "down"}}]},
    {},
    {
        "prompt": "into the lava",
        "controls": [{"track": "action", "schema": "livegen.action.v1", "data": {"action": "left"}}],
    },
    {},
]


@pytest.fixture(scope="module")
def world_server(registries: Registries) -> object:
    # pinned: these tests check procedural-world's exact frames and state (whatever the default is)
    config = ServerConfig(api_key=None, world_model="procedural-world")
    with ServerThread(config, registries.for_config(config)) as server:  # the run's voice model
        server.wait_ready()
        yield server


async def play(server: ServerThread, seed: int) -> list[tuple[list[int], list[np.ndarray]]]:
    client = await WorldClient.connect(server.ws_url, auto_ack=False)
    chunks = []
    async with client:
        await client.create(
            seed=seed, prompt="forest", pacing="asap", max_chunks_ahead=1, output={"format": "png"}
        )
        event_id = 0
        for step in SCRIPT:
            chunk = await client.next_chunk()
            chunks.append((chunk.header.applied_event_ids, chunk.frames))
            if step:
                event_id += 1
                await client.event(event_id, **step)
            await client.send({"type": "chunk.ack", "chunk_index": chunk.header.chunk_index})
        chunk = await client.next_chunk()
        chunks.append((chunk.header.applied_event_ids, chunk.frames))
    return chunks


async def test_same_seed_and_events_give_identical_frames(world_server: ServerThread) -> None:
    first = await play(world_server, seed=11)
    second = await play(world_server, seed=11)
    assert [ids for ids, _ in first] == [ids for ids, _ in second]
    assert [ids for ids, _ in first][1:] == [[1], [2], [3], [], [4], []]
    for (_, a), (_, b) in zip(first, second, strict=True):
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    other = await play(world_server, seed=12)
    assert not all(np.array_equal(x[1][0], y[1][0]) for x, y in zip(first, other, strict=True))


async def test_a_recorded_session_replays_to_identical_frames(world_server: ServerThread) -> None:
    recorded = await play(world_server, seed=5)
    events = {i + 1: step for i, step in enumerate(s for s in SCRIPT if s)}
    model = ProceduralWorld()
    prompt, controls = "forest", {"action": {"action": "none"}}
    for index, (applied, frames) in enumerate(recorded):
        for event_id in applied:
            prompt = events[event_id].get("prompt", prompt)
            for control in events[event_id].get("controls", ()):
                controls = {**controls, control["track"]: control["data"]}
        meta = TickMeta("replay", f"r{index}", index, tuple(applied))
        [chunk] = model.step([Tick(meta, 5, prompt, controls)], None)
        assert all(np.array_equal(x, y) for x, y in zip(chunk.frames, frames, strict=True))
