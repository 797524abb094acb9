"""Shared worlds over the wire (issue 39): ``session.player_token``, then ``/v1/worlds?join=ID&token=T``.

Two players steer their own agents in one procedural-world session: each
one's events move its agent only, every chunk header names both players'
events, and both players get the same chunks, whose decoded frames show the
two agents where the game's rules put them. Bad input (a wrong or expired
token, a seat past the model's two, another player's track, the owner's
messages from a player) gets a clear error to that client alone, and the
session goes on for everyone; a player that leaves frees its seat.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import websockets
from test_world_recordings import until_ended

from livegen.client.world import ChunkOut, WorldClient
from livegen.models.room import game
from livegen.protocol import world as wire
from livegen.runtime.world.replay import read_recording, replay
from livegen.server.thread import ServerThread

StartServer = Callable[..., ServerThread]
#: A room where the first agent can go right and the second up for a chunk's frames and more.
SEED = 3


def action(track: str, value: str) -> list[dict[str, Any]]:
    return [{"track": track, "schema": "livegen.action.v1", "data": {"action": value}}]


async def owner_with_token(
    server: ServerThread, *, auto_ack: bool = False, **session: Any
) -> tuple[WorldClient, wire.PlayerTokenCreated]:
    owner = await WorldClient.connect(server.ws_url, auto_ack=auto_ack)
    await owner.create(pacing="asap", seed=SEED, max_chunks_ahead=1, output={"format": "png"}, **session)
    return owner, await new_token(owner)


async def new_token(owner: WorldClient) -> wire.PlayerTokenCreated:
    return await owner.player_token()


async def join(server: ServerThread, url: str) -> tuple[WorldClient, wire.PlayerJoined]:
    player = await WorldClient.join(server.ws_url, url)
    assert player.joined is not None
    return player, player.joined


async def refusal(server: ServerThread, url: str) -> tuple[dict[str, Any], int]:
    """The one error and close code a refused player gets."""
    async with websockets.connect(server.ws_url + url) as refused:
        event = json.loads(await refused.recv())
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await refused.recv()
    assert closed.value.rcvd is not None
    return event, closed.value.rcvd.code


async def chunk_at(client: WorldClient, index: int) -> ChunkOut:
    """The client's chunk ``index`` (a player joins between chunks: earlier ones are skipped)."""
    while (chunk := await client.next_chunk()).header.chunk_index < index:
        pass
    assert chunk.header.chunk_index == index
    return chunk


def expected_frames(moves: list[tuple[str, str]]) -> list[np.ndarray]:
    """The game's frames for ``moves`` (first agent, second agent) from ``SEED``'s room."""
    state, frames = game.new_game(SEED), []
    for first, second in moves:
        if second != "none" and state.agent2 is None:
            state = game.enter(state, game.second_agent_home(SEED))
        state = game.step(state, first, second)
        frames.append(game.render(state))
    return frames


def where(frame: np.ndarray, colour: tuple[int, int, int]) -> tuple[int, int]:
    """The top-left pixel of ``colour`` in the frame: an agent's position."""
    ys, xs = np.nonzero(np.all(frame == colour, axis=-1))
    return int(xs.min()), int(ys.min())


async def test_two_players_steer_their_own_agents_in_one_procedural_world(start_server: StartServer) -> None:
    server = start_server(world_model="procedural-world", voice_model="none")
    server.wait_ready()
    owner, token = await owner_with_token(server)
    session_id = owner.session["id"]
    assert owner.session["capabilities"]["players"] == 2
    assert token.url == f"/v1/worlds?join={session_id}&token={token.token}"
    first = await owner.next_chunk()  # chunk 0; chunk 1 waits for its ack (max_chunks_ahead 1)
    player, joined = await join(server, token.url)
    async with owner, player:
        assert joined.player == 2 and joined.tracks == ["action_2", "keys_2"]
        assert joined.session["id"] == session_id
        # Each player numbers its own events: both send id 1, each for its own agent.
        assert (await owner.event(1, controls=action("action", "right"))).status == "accepted"
        assert (await player.event(1, controls=action("action_2", "up"))).status == "accepted"
        await owner.send({"type": "chunk.ack", "chunk_index": first.header.chunk_index})
        chunk = await owner.next_chunk()
        seen = await chunk_at(player, chunk.header.chunk_index)
        assert chunk.header.applied_event_ids == [1]  # the owner's, as before shared worlds
        assert chunk.header.applied_events == [wire.AppliedEvent(1, 1), wire.AppliedEvent(2, 1)]
        assert seen.header == chunk.header and seen.raw == chunk.raw  # one world, the same chunk for both

        frames = chunk.frames
        rest = [("none", "none")] * first.header.num_frames
        expected = expected_frames(rest + [("right", "up")] * len(frames))[len(rest) :]
        assert all(np.array_equal(got, want) for got, want in zip(frames, expected, strict=True))
        start = game.new_game(SEED)
        agent = tuple(int(v) for v in game.render(start)[start.agent[1], start.agent[0]])
        home = game.second_agent_home(SEED)
        firsts = [where(frame, agent) for frame in frames]  # type: ignore[arg-type]
        seconds = [where(frame, game.AGENT_2[start.theme]) for frame in frames]
        assert firsts == [(start.agent[0] + 2 * k, start.agent[1]) for k in range(1, len(frames) + 1)]
        assert seconds == [(home[0], home[1] - 2 * k) for k in range(1, len(frames) + 1)]


async def test_bad_player_input_is_refused_to_that_client_and_everyone_goes_on(
    start_server: StartServer,
) -> None:
    server = start_server(world_model="procedural-world", voice_model="none", world_spectate_token_ttl_s=3.0)
    server.wait_ready()
    owner, token = await owner_with_token(server, auto_ack=True)
    session_id = owner.session["id"]
    async with owner:
        for url in (
            f"/v1/worlds?join={session_id}&token=wrong",
            f"/v1/worlds?join={session_id}",
            f"/v1/worlds?join=nosuchsession&token={token.token}",
        ):
            event, code = await refusal(server, url)
            assert event["error"]["code"] == "invalid_player_token" and code == 1008, url
            assert "session.player_token" in event["error"]["message"]
        player, _ = await join(server, token.url)
        async with player:
            event, code = await refusal(server, token.url)  # a third player: the model takes two
            assert event["error"]["code"] == "too_many_players" and code == 1013
            for message, code in (
                (
                    {"type": "world.event", "event_id": 5, "controls": action("action", "left")},
                    "track_not_yours",
                ),
                ({"type": "world.event", "event_id": 6, "prompt": "a lava room"}, "prompt_not_yours"),
                ({"type": "world.reset"}, "owner_only"),
                ({"type": "session.player_token"}, "owner_only"),
            ):
                await player.send(message)
                error = await player.expect(wire.Error)
                assert error.error.code == code, message
            await owner.send({"type": "world.event", "event_id": 1, "controls": action("action_2", "up")})
            assert (await owner.expect(wire.Error)).error.code == "track_not_yours"
            # Nobody's session ended: both steer on, and each hears only of its own events.
            assert (await owner.event(2, controls=action("action", "right"))).event_id == 2
            assert (await player.event(5, controls=action("action_2", "down"))).event_id == 5
            applied: set[tuple[int, int]] = set()
            while applied != {(1, 2), (2, 5)}:
                header = (await owner.next_chunk()).header
                applied |= {(e.player, e.event_id) for e in header.applied_events}
            assert owner.events.empty()
        # The player left: its seat is free for the next one, whose ids are its own; a new token
        # replaces the last.
        replacement = await new_token(owner)
        event, _ = await refusal(server, token.url)
        assert event["error"]["code"] == "invalid_player_token"
        again, rejoined = await join(server, replacement.url)
        async with again:
            assert rejoined.player == 2
            assert (await again.event(1, controls=action("action_2", "left"))).status == "accepted"
        expiring = await new_token(owner)
        await asyncio.sleep(3.0)  # past the token's three seconds
        event, code = await refusal(server, expiring.url)
        assert event["error"]["code"] == "player_token_expired" and code == 1008
        last, _ = await join(server, (await new_token(owner)).url)
        async with last:
            await owner.close()
            assert isinstance(await last.expect(wire.SessionClosed), wire.SessionClosed)


async def test_a_recorded_shared_world_replays_both_players_moves(
    start_server: StartServer, tmp_path: Path
) -> None:
    """W6 with two players: the log names each event's player, and a replay seats them again."""
    server = start_server(world_model="procedural-world", voice_model="none", world_recordings=str(tmp_path))
    server.wait_ready()
    owner, token = await owner_with_token(server, auto_ack=True, recording=True)
    assert owner.recording is not None
    async with owner:
        player, _ = await join(server, token.url)
        async with player:
            await owner.event(1, controls=action("action", "right"))
            await player.event(1, controls=action("action_2", "up"))
            await player.event(2, controls=action("action_2", "left"))
            applied: set[tuple[int, int]] = set()
            while applied != {(1, 1), (2, 1), (2, 2)}:
                header = (await owner.next_chunk()).header
                applied |= {(e.player, e.event_id) for e in header.applied_events}
        await owner.close()
    lines = await until_ended(tmp_path / owner.recording.recording_id)
    logged = [
        (line.get("player", 1), line["event"]["event_id"]) for line in lines if line["type"] == "world.event"
    ]
    assert logged == [(1, 1), (2, 1), (2, 2)]
    verdict = await replay(read_recording(tmp_path / owner.recording.recording_id))
    assert verdict.is_match, verdict.mismatch
    assert verdict.chunks >= 2
