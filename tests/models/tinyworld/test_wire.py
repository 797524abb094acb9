"""tiny-world behind /v1/worlds, the default world model, over the wire: the game's first frame, and
the same seed and events give the same frames (the client holds flow control so events land on the
same chunks)."""

from __future__ import annotations

import base64
import io

import httpx
import numpy as np
import pytest

pytest.importorskip("torch")

from PIL import Image

from livegen.client.world import WorldClient
from livegen.models.room import game
from livegen.protocol import world as wire
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


def png(pixels: np.ndarray) -> str:
    buffer = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue()).decode()


async def test_tiny_world_starts_from_a_32x32_seed_image_and_refuses_other_sizes() -> None:
    image = game.render(game.new_game(5, "lava"))[:, ::-1].copy()  # a room the game never starts in
    with ServerThread(ServerConfig(voice_model="none", api_key=None)) as server:
        server.wait_ready()
        client = await WorldClient.connect(server.ws_url)
        async with client:
            await client.send(
                {"type": "session.update", "session": {"seed_image": png(np.zeros((64, 64, 3), np.uint8))}}
            )
            error = await client.expect(wire.Error)
            assert error.error.code == "invalid_seed_image" and "takes 32x32" in error.error.message
            await client.create(
                seed=5, prompt="lava", pacing="asap", output={"format": "png"}, seed_image=png(image)
            )
            chunk = await client.next_chunk()
    assert np.array_equal(chunk.frames[0], image)
    assert not np.array_equal(chunk.frames[0], game.render(game.new_game(5, "lava")))
