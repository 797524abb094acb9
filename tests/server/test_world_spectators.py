"""Spectators over the wire (issue 29): ``session.spectate_token``, then ``/v1/worlds?spectate=ID&token=T``.

A spectator gets the player's chunks (same headers, same frame bytes) from
the moment it joins, may not steer, and leaves when the session ends; a wrong,
replaced or expired token and a full session are refused with a clear error;
a spectator that never reads is dropped with 4002 while the player gets every
chunk (no timing is asserted: the player's chunks are counted, all of them).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
import websockets
from test_budgets import RawWebSocket

from livegen.client.world import WorldClient
from livegen.protocol import world as wire
from livegen.runtime.closes import CLOSE_NOT_READING
from livegen.server.thread import ServerThread

StartServer = Callable[..., ServerThread]


async def player_with_token(
    server: ServerThread, **session: Any
) -> tuple[WorldClient, wire.SpectateTokenCreated]:
    client = await WorldClient.connect(server.ws_url, auto_ack=session.pop("auto_ack", True))
    await client.create(**{"pacing": "asap", **session})
    return client, await new_token(client)


async def new_token(client: WorldClient) -> wire.SpectateTokenCreated:
    await client.send({"type": "session.spectate_token"})
    token: wire.SpectateTokenCreated = await client.expect(wire.SpectateTokenCreated)
    return token


async def refusal(server: ServerThread, url: str) -> tuple[dict[str, Any], int]:
    """The one event and close code a refused spectator gets."""
    async with websockets.connect(server.ws_url + url) as spectator:
        event = json.loads(await spectator.recv())
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await spectator.recv()
    assert closed.value.rcvd is not None
    return event, closed.value.rcvd.code


def spectators(server: ServerThread) -> Any:
    [service] = server.app.state.livegen.services
    return service.engine.spectators


async def test_a_spectator_sees_the_players_chunks_from_when_it_joins(start_server: StartServer) -> None:
    server = start_server(world_model="procedural-world", voice_model="none")
    server.wait_ready()
    player = await WorldClient.connect(server.ws_url, auto_ack=False)
    await player.create(pacing="asap", max_chunks_ahead=1, output={"format": "png"})
    chunk = await player.next_chunk()  # chunk 0 is sent before the spectator joins; chunk 1 waits for an ack
    token = await new_token(player)
    assert token.url == f"/v1/worlds?spectate={player.session['id']}&token={token.token}"
    async with player, websockets.connect(server.ws_url + token.url) as spectator:
        started = json.loads(await spectator.recv())
        assert started["type"] == "spectate.started" and started["session"]["id"] == player.session["id"]
        for index in range(1, 4):
            if index == 2:
                await player.action(1, "right")
            await player.send({"type": "chunk.ack", "chunk_index": chunk.header.chunk_index})
            chunk = await player.next_chunk()
            header = json.loads(await spectator.recv())
            frames = [await spectator.recv() for _ in range(header["num_frames"])]
            assert header["type"] == "world.chunk" and header["chunk_index"] == index
            assert header["request_id"] == chunk.header.request_id
            assert header["applied_event_ids"] == chunk.header.applied_event_ids
            assert frames == chunk.raw
        await spectator.send(json.dumps({"type": "world.event", "event_id": 9, "prompt": "lava"}))
        refused = json.loads(await spectator.recv())
        assert refused["type"] == "error" and refused["error"]["code"] == "spectator_read_only"
        await player.reset()
        assert json.loads(await spectator.recv())["type"] == "world.reset.done"
        await player.close()
        assert json.loads(await spectator.recv())["type"] == "session.closed"
        with pytest.raises(websockets.ConnectionClosedOK):
            await spectator.recv()


async def test_wrong_replaced_and_expired_tokens_and_a_full_session_are_refused(
    start_server: StartServer,
) -> None:
    server = start_server(
        world_model="procedural-world",
        voice_model="none",
        world_max_spectators_per_session=1,
        world_spectate_token_ttl_s=1.0,
    )
    server.wait_ready()
    player, token = await player_with_token(server)
    async with player:
        session_id = player.session["id"]
        for url in (
            f"/v1/worlds?spectate={session_id}&token=wrong",
            f"/v1/worlds?spectate={session_id}",
            f"/v1/worlds?spectate=nosuchsession&token={token.token}",
        ):
            event, code = await refusal(server, url)
            assert event["error"]["code"] == "invalid_spectate_token", url
            assert "session.spectate_token" in event["error"]["message"] and code == 1008

        async with websockets.connect(server.ws_url + token.url) as first:
            assert json.loads(await first.recv())["type"] == "spectate.started"
            event, code = await refusal(server, token.url)
            assert event["error"]["code"] == "too_many_spectators" and code == 1013

        replacement = await new_token(player)
        event, _ = await refusal(server, token.url)  # the replaced token admits nobody
        assert event["error"]["code"] == "invalid_spectate_token"
        await asyncio.sleep(1.2)
        event, code = await refusal(server, replacement.url)
        assert event["error"]["code"] == "spectate_token_expired" and code == 1008


async def test_a_spectator_that_never_reads_is_dropped_and_the_player_gets_every_chunk(
    start_server: StartServer,
) -> None:
    server = start_server(world_model="procedural-world", voice_model="none", max_unsent_bytes=64 * 1024)
    server.wait_ready()
    player, token = await player_with_token(server, output={"format": "rgb24"})
    async with player:
        spectator = RawWebSocket(server.port, token.url)  # reads nothing until told to
        with spectator.sock:
            indexes = [(await player.next_chunk()).header.chunk_index]
            while spectators(server).num_spectators == 0:
                indexes.append((await player.next_chunk()).header.chunk_index)
            for _ in range(20_000):  # until the server drops the spectator
                indexes.append((await player.next_chunk()).header.chunk_index)
                if spectators(server).num_spectators == 0:
                    break
            else:
                pytest.fail("the server never dropped a spectator that does not read")
            for _ in range(20):  # and the player goes on
                indexes.append((await player.next_chunk()).header.chunk_index)
            assert indexes == list(range(indexes[0], indexes[0] + len(indexes)))
            events, code = spectator.read_until_close()
    assert code == CLOSE_NOT_READING
    assert events[0]["type"] == "spectate.started"
    assert events[-1]["type"] == "error" and events[-1]["error"]["code"] == "unsent_bytes_exceeded"


async def test_a_silent_spectator_is_not_closed_by_the_first_message_timeout(
    start_server: StartServer,
) -> None:
    server = start_server(world_model="procedural-world", voice_model="none", first_message_timeout_s=0.3)
    server.wait_ready()
    player = await WorldClient.connect(server.ws_url, auto_ack=False)
    await player.create(pacing="asap", max_chunks_ahead=1)
    chunk = await player.next_chunk()
    token = await new_token(player)
    async with player, websockets.connect(server.ws_url + token.url) as spectator:
        assert json.loads(await spectator.recv())["type"] == "spectate.started"
        await asyncio.sleep(0.9)  # three times the timeout, saying nothing
        await player.send({"type": "chunk.ack", "chunk_index": chunk.header.chunk_index})
        header = json.loads(await spectator.recv())
        assert header["type"] == "world.chunk" and header["chunk_index"] == 1


async def test_spectators_are_bounded_server_wide(start_server: StartServer) -> None:
    server = start_server(world_model="procedural-world", voice_model="none", world_max_spectators=1)
    server.wait_ready()
    first, first_token = await player_with_token(server)
    second, second_token = await player_with_token(server)
    async with first, second:
        async with websockets.connect(server.ws_url + first_token.url) as watching:
            assert json.loads(await watching.recv())["type"] == "spectate.started"
            event, code = await refusal(server, second_token.url)
            assert (
                event["error"]["code"] == "too_many_spectators" and "the server" in event["error"]["message"]
            )
            assert code == 1013
        for _ in range(200):  # the first spectator's place is free once it has gone
            if spectators(server).num_spectators == 0:
                break
            await asyncio.sleep(0.02)
        async with websockets.connect(server.ws_url + second_token.url) as now_admitted:
            assert json.loads(await now_admitted.recv())["type"] == "spectate.started"
