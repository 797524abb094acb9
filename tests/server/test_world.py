"""Wire tests of /v1/worlds on the real server: each row of docs/world-protocol.md, and bad input."""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import numpy as np
import pytest

from livegen.client.world import ChunkOut, WorldClient, WorldError
from livegen.models.world import Frames
from livegen.protocol import world as wire
from livegen.runtime.world import engine as world_engine
from livegen.runtime.world import runner as world_runner
from livegen.runtime.world import sender as world_sender
from livegen.server.config import ServerConfig
from livegen.server.thread import ServerThread
from sharing import Registries

RIGHT = {"track": "action", "schema": "livegen.action.v1", "data": {"action": "right"}}


@pytest.fixture(scope="module")
def world_server(registries: Registries) -> object:
    # pinned: these tests check procedural-world's exact frames and state (whatever the default is)
    config = ServerConfig(api_key=None, world_model="procedural-world")
    with ServerThread(config, registries.for_config(config)) as server:  # the run's voice model
        server.wait_ready()
        yield server


async def connect(server: ServerThread, **session: object) -> tuple[WorldClient, dict[str, object]]:
    client = await WorldClient.connect(server.ws_url)
    created = await client.create(**{"pacing": "asap", **session})
    return client, created


async def test_session_created_describes_the_world(world_server: ServerThread) -> None:
    client, created = await connect(world_server, seed=7, prompt="snow", output={"format": "png"})
    async with client:
        assert created["width"] == created["height"] == 32
        assert created["fps"] == 16.0 and created["frames_per_chunk"] == 4
        assert created["seed"] == 7 and created["prompt"] == "snow" and created["pacing"] == "asap"
        assert created["output"] == {"format": "png", "quality": 85}
        control, keys, control_2, keys_2 = created["controls"]  # the second player's two (issue 39)
        assert keys["track"] == "keys" and keys["schema"] == "livegen.keys.v1"
        assert (control_2["track"], keys_2["track"]) == ("action_2", "keys_2")
        assert (control_2["schema"], keys_2["schema"]) == (control["schema"], keys["schema"])
        assert control["track"] == "action" and control["schema"] == "livegen.action.v1"
        assert control["json_schema"]["properties"]["action"]["enum"] == [
            "none",
            "up",
            "down",
            "left",
            "right",
        ]
        assert isinstance(created["id"], str) and created["id"]


async def test_later_session_update_answers_session_updated(world_server: ServerThread) -> None:
    client, _ = await connect(world_server)
    async with client:
        await client.send({"type": "session.update", "session": {"output": {"format": "rgb24"}}})
        updated = await client.expect(wire.SessionUpdated)
        assert updated.session["output"]["format"] == "rgb24"
        await client.send({"type": "session.update", "session": {"seed": 99}})
        with pytest.raises(WorldError) as error:
            await client.expect(wire.SessionUpdated)
        assert error.value.body.param == "session.seed"


async def test_session_update_mid_encode_changes_only_later_chunks(
    world_server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk keeps the format it was encoded in, whenever a session.update lands.

    The update is made to land while a chunk is encoding (the window that heavy
    CPU load widens): that chunk's header must still say jpeg, so its frames
    decode, and later chunks are rgb24.
    """
    is_encoding, is_reconfigured = threading.Event(), threading.Event()
    real_encode, real_reconfigure = world_sender.encode_chunk, world_engine.WorldEngine.reconfigure
    num_held: list[int] = []

    def held_encode(frames: Frames, fmt: str, quality: int = 85) -> list[bytes]:
        if (fmt, quality) == ("jpeg", 37) and not num_held:  # this session's first chunk only
            num_held.append(1)
            is_encoding.set()
            assert is_reconfigured.wait(10), "the session.update never reached the runner"
        return real_encode(frames, fmt, quality)

    def reconfigure(
        self: world_engine.WorldEngine, runner: world_runner.Runner, update: wire.SessionConfig
    ) -> None:
        real_reconfigure(self, runner, update)
        is_reconfigured.set()

    monkeypatch.setattr(world_sender, "encode_chunk", held_encode)
    monkeypatch.setattr(world_engine.WorldEngine, "reconfigure", reconfigure)
    client, _ = await connect(world_server, output={"format": "jpeg", "quality": 37})
    async with client:
        assert await asyncio.to_thread(is_encoding.wait, 10)
        await client.send({"type": "session.update", "session": {"output": {"format": "rgb24"}}})
        first = await client.next_chunk()
        assert first.header.format == "jpeg"
        assert all(f.shape == (32, 32, 3) for f in first.frames)
        assert (await client.expect(wire.SessionUpdated)).session["output"]["format"] == "rgb24"
        formats = [first.header.format]
        while formats[-1] != "rgb24":
            chunk = await client.next_chunk()
            assert all(f.shape == (32, 32, 3) for f in chunk.frames)
            formats.append(chunk.header.format)
        assert formats == ["jpeg"] * (len(formats) - 1) + ["rgb24"]


async def test_chunks_carry_frames_and_applied_events(world_server: ServerThread) -> None:
    client, _ = await connect(world_server, output={"format": "png"})
    async with client:
        accepted = await client.event(5, controls=[RIGHT])
        assert (accepted.event_id, accepted.status) == (5, "accepted")
        assert accepted.pending_event_count >= 0
        seen: list[int] = []
        applied: list[int] = []
        while 5 not in applied:
            chunk = await client.next_chunk()
            seen.append(chunk.header.chunk_index)
            applied.extend(chunk.header.applied_event_ids)
            assert chunk.header.num_frames == len(chunk.frames) == 4
            assert all(f.shape == (32, 32, 3) and f.dtype == np.uint8 for f in chunk.frames)
            assert chunk.header.media_time_ms == pytest.approx(chunk.header.chunk_index * 250.0)
            assert chunk.header.timings.model_ms >= 0 and chunk.header.timings.encode_ms >= 0
        assert seen == list(range(len(seen))), "chunk indexes must be contiguous from 0"
        assert applied == [5]


async def test_duplicate_and_stale_events(world_server: ServerThread) -> None:
    client, _ = await connect(world_server)
    async with client:
        await client.event(3, prompt="ocean")
        again = await client.event(3, prompt="ocean")
        assert again.status == "duplicate"
        while 3 not in (await client.next_chunk()).header.applied_event_ids:
            pass
        await client.send({"type": "world.event", "event_id": 2, "prompt": "lava"})
        with pytest.raises(WorldError) as error:
            await client.expect(wire.EventAccepted)
        assert error.value.code == "stale_event" and error.value.body.event_id == 2
        assert (await client.event(4, prompt="lava")).status == "accepted"


async def test_queue_full_rejects_without_blocking(world_server: ServerThread) -> None:
    client = await WorldClient.connect(world_server.ws_url, auto_ack=False)
    async with client:
        await client.create(pacing="asap", max_pending_events=2, max_chunks_ahead=1)
        await client.next_chunk()  # chunk 0 is out and unacked: no more ticks, events stay queued
        await client.event(1, prompt="a")
        await client.event(2, prompt="b")
        await client.send({"type": "world.event", "event_id": 3, "prompt": "c"})
        with pytest.raises(WorldError) as error:
            await client.expect(wire.EventAccepted)
        assert error.value.code == "queue_full" and error.value.body.event_id == 3


async def test_flow_control_waits_for_ack(world_server: ServerThread) -> None:
    client = await WorldClient.connect(world_server.ws_url, auto_ack=False)
    async with client:
        await client.create(pacing="asap", max_chunks_ahead=2)
        assert [(await client.next_chunk()).header.chunk_index for _ in range(2)] == [0, 1]
        with pytest.raises(TimeoutError):
            await client.next_chunk(wait_s=0.5)
        await client.send({"type": "chunk.ack", "chunk_index": 0})
        assert (await client.next_chunk()).header.chunk_index == 2


async def test_an_ack_at_start_frees_credit_so_the_next_chunk_generates_while_one_plays(
    world_server: ServerThread,
) -> None:
    """``chunk.ack`` with ``at: "start"`` (sent when a chunk's first frame shows) is understood and
    frees the same credit as an ack at end; a bad ``at`` is refused for that message only."""
    client = await WorldClient.connect(world_server.ws_url, auto_ack=False)
    async with client:
        await client.create(pacing="asap", max_chunks_ahead=1)
        assert (await client.next_chunk()).header.chunk_index == 0
        await client.send({"type": "chunk.ack", "chunk_index": 0, "at": "middle"})
        with pytest.raises(WorldError) as error:
            await client.expect(wire.EventAccepted)
        assert error.value.code == "invalid_request" and error.value.body.param == "at"
        await client.send({"type": "chunk.ack", "chunk_index": 0, "at": "start"})
        assert (await client.next_chunk()).header.chunk_index == 1
        await client.send({"type": "chunk.ack", "chunk_index": 1, "at": "start"})
        assert (await client.next_chunk()).header.chunk_index == 2
        await client.event(1, prompt="night")  # the session goes on: no error came for the acks


async def test_reset_restarts_chunk_index_and_keeps_event_ids(world_server: ServerThread) -> None:
    client, _ = await connect(world_server)
    async with client:
        await client.event(10, prompt="night")
        while (await client.next_chunk()).header.chunk_index < 2:
            pass
        await client.reset()
        chunk = await client.next_chunk()
        while chunk.header.chunk_index != 0:  # chunks generated before the reset may still be queued
            chunk = await client.next_chunk()
        assert (await client.event(10, prompt="x")).status == "duplicate"  # ids survive reset
        await client.send({"type": "world.event", "event_id": 9, "prompt": "x"})
        with pytest.raises(WorldError) as error:
            await client.expect(wire.EventAccepted)
        assert error.value.code == "stale_event"
        assert (await client.event(11, prompt="x")).status == "accepted"


async def test_close_then_events_get_errors_and_the_server_goes_on(world_server: ServerThread) -> None:
    client, _ = await connect(world_server)
    async with client:
        await client.close()
        await client.send({"type": "world.event", "event_id": 1, "prompt": "x"})
        with pytest.raises(WorldError) as error:
            await client.expect(wire.EventAccepted)
        assert error.value.code == "session_closed" and error.value.body.event_id == 1
    other, _ = await connect(world_server)
    async with other:
        assert (await other.next_chunk()).header.chunk_index == 0


BAD_INPUT = [
    ("{not json", "invalid_json", None),
    ('{"type": "world.teleport", "event_id": 4}', "unknown_event_type", 4),
    ('{"type": "world.event", "event_id": "7", "prompt": "x"}', "invalid_event", None),
    ('{"type": "world.event", "event_id": 7, "prompt": 5}', "invalid_event", 7),
    ('{"type": "world.event", "event_id": true, "prompt": "x"}', "invalid_event", None),
    ('{"type": "world.event", "event_id": -1, "prompt": "x"}', "invalid_event", None),
    ('{"type": "world.event", "event_id": 8}', "invalid_event", 8),
    (json.dumps({"type": "world.event", "event_id": 9, "controls": [RIGHT, RIGHT]}), "invalid_event", 9),
    (
        json.dumps({"type": "world.event", "event_id": 10, "controls": [{**RIGHT, "data": "right"}]}),
        "invalid_event",
        10,
    ),
    (
        '{"type": "world.event", "event_id": 11, "controls": '
        '[{"track": "action", "schema": "livegen.action.v1", "data": {"action": NaN}}]}',
        "invalid_json",
        None,
    ),
    (
        json.dumps(
            {"type": "world.event", "event_id": 12, "controls": [{**RIGHT, "data": {"action": "fly"}}]}
        ),
        "invalid_event",
        12,
    ),
    (
        json.dumps({"type": "world.event", "event_id": 13, "controls": [{**RIGHT, "track": "camera"}]}),
        "invalid_event",
        13,
    ),
    (json.dumps({"type": "chunk.ack", "chunk_index": -3}), "invalid_request", None),
    (json.dumps({"type": "session.update", "session": {"model": "no-such-model"}}), "model_not_found", None),
    (json.dumps({"type": "world.event", "event_id": 14, "prompt": "x" * 70_000}), "message_too_large", None),
]


@pytest.mark.parametrize(("message", "code", "event_id"), BAD_INPUT)
async def test_bad_input_gets_an_error_and_the_session_goes_on(
    world_server: ServerThread, message: str, code: str, event_id: int | None
) -> None:
    client, _ = await connect(world_server)
    async with client:
        await client.send_raw(message)
        error = await client.expect(wire.Error)
        assert error.error.code == code, error
        assert error.error.event_id == event_id
        assert (await client.event(100, prompt="still here")).status == "accepted"


async def test_events_before_session_update_are_refused(world_server: ServerThread) -> None:
    client = await WorldClient.connect(world_server.ws_url)
    async with client:
        await client.send({"type": "world.event", "event_id": 1, "prompt": "x"})
        error = await client.expect(wire.Error)
        assert error.error.code == "session_not_created" and error.error.event_id == 1
        await client.create(pacing="asap")


async def test_errors_are_counted_and_health_reports_the_model(world_server: ServerThread) -> None:
    client, _ = await connect(world_server)  # its own bad input: the test must not rely on another's
    async with client:
        await client.send_raw("{not json")
        assert (await client.expect(wire.Error)).error.code == "invalid_json"
    async with httpx.AsyncClient(base_url=world_server.http_url) as http:
        health = (await http.get("/health")).json()
        metrics = (await http.get("/metrics")).text
    assert health["services"]["world"]["ready"] is True
    assert health["services"]["world"]["model"] == "procedural-world"
    assert 'livegen_errors_total{code="invalid_json",kind="world"}' in metrics


async def test_procedural_world_refuses_a_seed_image_and_the_connection_goes_on(
    world_server: ServerThread,
) -> None:
    """It renders the game itself: an image is refused with a typed error, then a session starts."""
    client = await WorldClient.connect(world_server.ws_url)
    async with client:
        png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
        await client.send({"type": "session.update", "session": {"seed_image": png}})
        error = await client.expect(wire.Error)
        assert (error.error.code, error.error.param) == ("seed_image_not_supported", "session.seed_image")
        created = await client.create(pacing="asap")
        assert created["seed_image"] is False
        assert (await client.next_chunk()).header.chunk_index == 0


async def _room_with_new_prompt(server: ServerThread, transition: dict[str, int]) -> list[ChunkOut]:
    client = await WorldClient.connect(server.ws_url, auto_ack=False)
    async with client:
        await client.create(
            seed=2, prompt="forest", pacing="asap", max_chunks_ahead=1, output={"format": "png"}
        )
        chunks = [await client.next_chunk()]
        await client.send({"type": "world.event", "event_id": 1, "prompt": "lava", **transition})
        await client.expect(wire.EventAccepted)
        for index in range(3):
            await client.send({"type": "chunk.ack", "chunk_index": index})
            chunks.append(await client.next_chunk())
    return chunks


async def test_the_room_takes_a_prompt_transition_and_switches_its_theme_at_once(
    world_server: ServerThread,
) -> None:
    """The room has no in-between colours: the theme switches in the transition's first chunk, and
    the headers still name each step, so a client sees the same transaction on every model."""
    blended = await _room_with_new_prompt(world_server, {"transition_chunks": 2})
    at_once = await _room_with_new_prompt(world_server, {})
    steps = [c.header.prompt_transition for c in blended]
    assert steps == [
        None,
        {"event_id": 1, "step": 1, "chunks": 2, "weight": 0.5, "last_chunk_index": 2},
        {"event_id": 1, "step": 2, "chunks": 2, "weight": 1.0, "last_chunk_index": 2},
        None,
    ]
    assert all(c.header.prompt_transition is None for c in at_once)
    for a, b in zip(blended, at_once, strict=True):
        assert all(np.array_equal(x, y) for x, y in zip(a.frames, b.frames, strict=True))
    assert not np.array_equal(blended[0].frames[-1], blended[1].frames[0])
