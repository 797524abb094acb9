"""procedural-world behind the world-model contract: deterministic, controllable, evictions visible."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from livegen.errors import ModelContractError, StateEvicted
from livegen.models import CATALOG, Kind, Registry
from livegen.models.room import game
from livegen.models.room.procedural import ProceduralWorld
from livegen.models.world import Tick, TickMeta, WorldModel


def tick(session: str, index: int, action: str = "none", prompt: str = "", seed: int = 1) -> Tick:
    return Tick(
        TickMeta(session, f"{session}-{index}", index, ()), seed, prompt, {"action": {"action": action}}
    )


def test_is_the_default_world_model_where_tiny_world_cannot_load() -> None:
    """A plain install has no torch: /v1/worlds then serves the game itself."""
    without_torch = [
        replace(entry, requires=("torch_is_not_installed_here",)) if entry.name == "tiny-world" else entry
        for entry in CATALOG
    ]
    registry = Registry(without_torch)
    assert registry.default(Kind.WORLD).name == "procedural-world"  # type: ignore[union-attr]
    model = registry.load("procedural-world")
    assert isinstance(model, WorldModel) and model.spec.kv is None
    assert [t.name for t in model.spec.controls] == ["action", "keys", "action_2", "keys_2"]
    assert model.spec.players == (("action", "keys"), ("action_2", "keys_2"))


def test_echoes_meta_and_shapes_frames() -> None:
    model = ProceduralWorld()
    ticks = [tick("a", 0), tick("b", 0, seed=2)]
    chunks = model.step(ticks, None)
    assert [c.meta for c in chunks] == [t.meta for t in ticks]
    assert all(c.frames.shape == (4, 32, 32, 3) and c.frames.dtype == np.uint8 for c in chunks)


def test_actions_move_the_agent_and_prompts_pick_themes() -> None:
    model = ProceduralWorld()
    still = model.step([tick("a", 0, prompt="desert")], None)[0].frames
    moved = model.step([tick("a", 1, action="right")], None)[0].frames
    assert np.array_equal(still[0], still[-1]), "no action, no motion"
    assert not np.array_equal(moved[0], moved[-1])
    state = game.new_game(1, "desert")
    assert np.array_equal(still[0], game.render(state))
    night = model.step([tick("a", 2, prompt="a night in the forest")], None)[0].frames
    assert not np.array_equal(night[0], moved[-1]), "the first theme word (night) recolours the room"


def test_same_seed_same_frames() -> None:
    a = ProceduralWorld().step([tick("x", 0, "down", "ocean", seed=9)], None)[0].frames
    b = ProceduralWorld().step([tick("y", 0, "down", "ocean", seed=9)], None)[0].frames
    assert np.array_equal(a, b)


def test_release_makes_continuation_raise_state_evicted() -> None:
    model = ProceduralWorld()
    model.step([tick("a", 0)], None)
    model.release("a")
    with pytest.raises(StateEvicted):
        model.step([tick("a", 1)], None)


def test_a_bad_tick_touches_no_session() -> None:
    model = ProceduralWorld()
    model.step([tick("a", 0)], None)
    with pytest.raises(ModelContractError):
        model.step([tick("a", 1, "right"), tick("a", 3)], None)
    assert model.step([tick("a", 1)], None)[0].meta.chunk_index == 1


def test_the_second_agent_enters_with_its_first_move_and_each_agent_follows_its_own_track() -> None:
    """A room nobody joined is the one-player room; player 2's track moves only the second agent."""
    model = ProceduralWorld()
    [alone] = model.step([tick("a", 0, "right")], None)
    state = game.new_game(1)
    for _ in range(alone.frames.shape[0]):
        state = game.step(state, "right")
    assert np.array_equal(alone.frames[-1], game.render(state))
    home = game.second_agent_home(1)
    meta = TickMeta("a", "a-1", 1, ())
    controls = {"action": {"action": "none"}, "action_2": {"action": "down"}}
    [joined] = model.step([Tick(meta, 1, "", controls)], None)
    second = game.AGENT_2[state.theme]
    last = joined.frames[-1]
    ys, xs = np.nonzero(np.all(last == second, axis=-1))
    assert (xs.min(), ys.min()) != home and xs.min() == home[0]  # it moved down from where it entered
    assert np.array_equal(
        last[state.agent[1], state.agent[0]], alone.frames[-1][state.agent[1], state.agent[0]]
    )
