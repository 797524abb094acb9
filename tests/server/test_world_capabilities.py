"""``session.capabilities`` of a world session, read over the wire from the real server."""

from __future__ import annotations

import msgspec
import pytest

from livegen.client.world import WorldClient
from livegen.protocol import world as wire
from livegen.server.config import ServerConfig
from livegen.server.thread import ServerThread


@pytest.fixture(scope="module")
def world_server() -> object:
    with ServerThread(ServerConfig(api_key=None, world_model="procedural-world")) as server:
        server.wait_ready()
        yield server


async def test_session_created_carries_the_capability_block(world_server: ServerThread) -> None:
    async with await WorldClient.connect(world_server.ws_url) as client:
        created = await client.create(pacing="asap")
        capabilities = msgspec.convert(created["capabilities"], wire.WorldCapabilities)
        assert capabilities == wire.WorldCapabilities(
            controls=["action", "keys"],  # the owner's: player 2 steers action_2 and keys_2
            fps=16.0,
            frames_per_chunk=4,
            first_chunk_frames=4,
            recording=False,  # no recordings configured on this server
            spectators=True,  # a player may hand out a spectate token
            transports=["websocket", "webrtc"],  # aiortc is installed: POST /v1/worlds/calls
            players=2,  # a second player may join (session.player_token)
        )
        # Every track is described; the owner's are the first player's (issue 39).
        assert [track["track"] for track in created["controls"]] == ["action", "keys", "action_2", "keys_2"]
        # session.updated carries the same block.
        await client.send({"type": "session.update", "session": {"output": {"format": "rgb24"}}})
        updated = await client.expect(wire.SessionUpdated)
        assert updated.session["capabilities"] == created["capabilities"]


async def test_the_capability_block_is_the_sessions_own_chunk_length(world_server: ServerThread) -> None:
    async with await WorldClient.connect(world_server.ws_url) as client:
        created = await client.create(pacing="asap", frames_per_chunk=1)
        assert created["capabilities"]["frames_per_chunk"] == created["frames_per_chunk"] == 1
        assert created["capabilities"]["first_chunk_frames"] == 1


def test_a_server_with_recordings_says_sessions_may_be_recorded(tmp_path: object) -> None:
    async def created() -> dict[str, object]:
        async with await WorldClient.connect(server.ws_url) as client:
            return await client.create(pacing="asap")

    import asyncio

    config = ServerConfig(api_key=None, world_model="procedural-world", world_recordings=str(tmp_path))
    with ServerThread(config) as server:
        server.wait_ready()
        capabilities = asyncio.run(created())["capabilities"]
    assert capabilities["recording"] is True  # type: ignore[index]
