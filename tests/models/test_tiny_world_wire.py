"""tiny-world behind /v1/worlds, the default world model, over the wire: the game's first frame, and
the same seed and events give the same frames (the client holds flow control so events land on the
same chunks)."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

pytest.importorskip("torch")

from livegen.client.world import WorldClient
from livegen.models import game
from livegen.server import ServerConfig
from livegen.server.thread import ServerThread

ACTIONS = ["right", "down", "left"]


async def play(server: ServerThread, seed: int) -> list[np.ndarray]:
    client = await WorldClient.connect(server.ws_url, auto_ack=False)
    frames: list[np.ndarray] = []
    async with client:
        await client.create(
            seed=seed, prompt="snow", pacing="asap", max_chunks_ahead=1, output={"format": "png"}
        )
        for event_id, action in enumerate(ACTIONS, start=1):
            chunk = await client.next_chunk()
            frames.extend(chunk.frames)
            data = {"action": action}
            await client.event(
                event_id, controls=[{"track": "action", "schema": "livegen.action.v1", "data": data}]
            )
            await client.send({"type": "chunk.ack", "chunk_index": chunk.header.chunk_index})
        frames.extend((await client.next_chunk()).frames)
    return frames


async def test_default_server_generates_worlds_with_tiny_world_from_the_games_first_frame() -> None:
    with ServerThread(ServerConfig(voice_model="none", api_key=None)) as server:
        server.wait_ready()
        async with httpx.AsyncClient() as http:
            health = (await http.get(f"{server.http_url}/health")).json()
        assert health["services"]["world"]["model"] == "tiny-world"
        first = await play(server, seed=21)
        again = await play(server, seed=21)
    assert len(first) == 4 * (len(ACTIONS) + 1)
    assert np.array_equal(first[0], game.render(game.new_game(21, "snow")))
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
