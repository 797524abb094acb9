"""The room game takes the `keys` track too: a held arrow key or WASD moves the agent like `action`,
and a tap (a key pressed and released within one chunk) moves it for one frame instead of being lost."""

from __future__ import annotations

import numpy as np
import pytest

from livegen.client.world import WorldClient
from livegen.models.room import game
from livegen.models.room.procedural import ProceduralWorld
from livegen.models.world import Tick, TickMeta
from livegen.server import ServerConfig
from livegen.server.thread import ServerThread

TAP = {"keys": {"down": [], "taps": ["ArrowRight"]}}


def test_frame_actions_put_taps_first_then_the_held_key_then_the_action_track() -> None:
    assert game.frame_actions({"action": {"action": "up"}}, 4) == ["up"] * 4
    held = {"action": {"action": "up"}, "keys": {"down": ["KeyD"], "taps": ["ArrowLeft", "KeyZ"]}}
    assert game.frame_actions(held, 4) == ["left", "right", "right", "right"]
    assert game.frame_actions(TAP, 4) == ["right", "none", "none", "none"]
    assert game.frame_actions({"keys": {"down": ["KeyQ"], "taps": []}}, 2) == ["none", "none"]


def agent_after(controls: dict[str, object]) -> tuple[int, int]:
    world = ProceduralWorld()
    world.step([Tick(TickMeta("s", "r0", 0, ()), 1, "", {})], None)
    world.step([Tick(TickMeta("s", "r1", 1, ()), 1, "", controls)], None)
    return world._games["s"][0].agent


def test_a_tap_moves_the_agent_one_frame_and_a_held_key_every_frame() -> None:
    still = agent_after({})
    tapped = agent_after(TAP)
    held = agent_after({"keys": {"down": ["ArrowRight"], "taps": []}})
    assert tapped[0] - still[0] == game.STEP_PX and tapped[1] == still[1]
    assert held[0] - still[0] == game.FRAMES_PER_CHUNK * game.STEP_PX


def test_tiny_world_taps_act_on_the_first_generated_frame() -> None:
    pytest.importorskip("torch")
    from livegen.models.tinyworld.model import _action_indices
    from livegen.models.tinyworld.vocab import ACTION_INDEX

    right, none = ACTION_INDEX["right"], ACTION_INDEX["none"]
    assert _action_indices(TAP, 4, 1) == [right, none, none, none]
    assert _action_indices(TAP, 4, 0) == [none, right, none, none]  # frame 0 of chunk 0 is the game's


async def test_a_quick_tap_over_the_wire_moves_the_agent() -> None:
    async def play(press: bool) -> list[np.ndarray]:
        client = await WorldClient.connect(server.ws_url, auto_ack=False)
        async with client:
            await client.create(seed=1, pacing="asap", max_chunks_ahead=1, output={"format": "png"})
            await client.next_chunk()
            if press:  # press and release before chunk 1 starts: both land in chunk 1
                for event_id, down in enumerate((["ArrowRight"], []), start=1):
                    data = {"down": down}
                    await client.event(
                        event_id, controls=[{"track": "keys", "schema": "livegen.keys.v1", "data": data}]
                    )
            await client.send({"type": "chunk.ack", "chunk_index": 0})
            return (await client.next_chunk()).frames

    with ServerThread(
        ServerConfig(voice_model="none", world_model="procedural-world", api_key=None)
    ) as server:
        server.wait_ready()
        tapped, still = await play(True), await play(False)
    world = ProceduralWorld()
    world.step([Tick(TickMeta("s", "r0", 0, ()), 1, "", {})], None)
    [expected] = world.step([Tick(TickMeta("s", "r1", 1, ()), 1, "", TAP)], None)
    assert all(np.array_equal(a, b) for a, b in zip(tapped, expected.frames, strict=True))
    assert not np.array_equal(tapped[-1], still[-1])
