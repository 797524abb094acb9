"""tiny-world served with one-frame chunks (``--world-frames-per-chunk 1``) over the real server.

The page's way of playing it: realtime pacing, one chunk ahead, each chunk acked when its (only)
frame shows (``at: "start"``); and a replay: the same seed and events, held to the same chunks by
flow control, give the same frames.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

pytest.importorskip("torch")

from livegen.client.world import WorldClient
from livegen.models.room import game
from livegen.server import ServerConfig
from livegen.server.thread import ServerThread

ACTIONS = ["right", "down", "left", "up", "right"]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    # No frame-clock admission (headroom 0): these tests are about pacing and determinism, and on a
    # busy machine admission refused the replay's second session (realtime_capacity).
    config = ServerConfig(
        voice_model="none", api_key=None, world_frames_per_chunk=1, world_realtime_headroom=0.0
    )
    with ServerThread(config) as thread:
        thread.wait_ready()
        yield thread


async def test_one_frame_chunks_play_in_realtime_with_acks_at_start(server: ServerThread) -> None:
    client = await WorldClient.connect(server.ws_url, auto_ack=False)
    async with client:
        created = await client.create(
            seed=3, prompt="snow", pacing="realtime", max_chunks_ahead=1, output={"format": "png"}
        )
        assert created["frames_per_chunk"] == 1 and created["first_chunk_frames"] == 1
        headers, frames = [], []
        for index in range(24):
            chunk = await client.next_chunk()
            headers.append(chunk.header)
            frames.extend(chunk.frames)
            await client.send({"type": "chunk.ack", "chunk_index": chunk.header.chunk_index, "at": "start"})
            if index % 4 == 1:
                await client.action(index, ACTIONS[(index // 4) % len(ACTIONS)])
        await client.close()
    assert [h.chunk_index for h in headers] == list(range(24))
    assert all(h.num_frames == 1 for h in headers)
    assert [h.media_time_ms for h in headers] == [k * 1000 / game.FPS for k in range(24)]
    assert len({h.request_id for h in headers}) == 24  # one transaction a chunk
    applied = [event_id for h in headers for event_id in h.applied_event_ids]
    assert applied == sorted(applied) and set(applied) <= {i for i in range(24) if i % 4 == 1}
    assert len(applied) >= 4  # events sent mid-stream land in later chunks, each once
    assert np.array_equal(frames[0], game.render(game.new_game(3, "snow")))


async def replay(server: ServerThread, seed: int) -> list[np.ndarray]:
    """``asap`` at one chunk ahead, acking only after the next event: events land on fixed chunks."""
    client = await WorldClient.connect(server.ws_url, auto_ack=False)
    frames: list[np.ndarray] = []
    async with client:
        await client.create(seed=seed, pacing="asap", max_chunks_ahead=1, output={"format": "png"})
        for event_id, action in enumerate(ACTIONS * 2, start=1):
            chunk = await client.next_chunk()
            frames.extend(chunk.frames)
            await client.action(event_id, action)
            await client.send({"type": "chunk.ack", "chunk_index": chunk.header.chunk_index})
        frames.extend((await client.next_chunk()).frames)
    return frames


async def test_the_same_seed_and_events_replay_to_identical_one_frame_chunks(server: ServerThread) -> None:
    first, again = await asyncio.gather(replay(server, 21), replay(server, 21))
    assert len(first) == len(ACTIONS) * 2 + 1
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    other = await replay(server, 22)
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))
