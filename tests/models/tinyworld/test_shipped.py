"""The tiny-world checkpoint shipped in the package: loads offline, passes its sha256 check, is small,
and has learned the room game well enough to follow a short walk."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from livegen.models import default_registry  # noqa: E402
from livegen.models.room import game  # noqa: E402
from livegen.models.tinyworld.sampling import rollout  # noqa: E402
from livegen.models.tinyworld.weights import WEIGHTS_FILE, load_net, shipped_dir  # noqa: E402
from livegen.models.world import Tick, TickMeta  # noqa: E402
from livegen.training.tinyworld.data import agent_errors  # noqa: E402


def test_shipped_weights_are_small_and_checked() -> None:
    net, manifest = load_net()
    assert (shipped_dir() / WEIGHTS_FILE).stat().st_size < 20 * 1024 * 1024
    assert manifest["step"] > 0 and manifest["train_seconds"] > 0
    assert sum(p.numel() for p in net.parameters()) > 100_000


def test_the_registry_loads_tiny_world_and_it_starts_from_the_games_frame() -> None:
    model = default_registry().load("tiny-world")
    _, manifest = load_net()
    assert model.deadband == manifest["deadband"] > 0  # serves with the deadband tuned for its weights
    meta = TickMeta("s", "r", 0, ())
    chunk = model.step(
        [Tick(meta=meta, seed=3, prompt="desert", controls={"action": {"action": "up"}})], None
    )[0]
    assert np.array_equal(chunk.frames[0], game.render(game.new_game(3, "desert")))
    model.release("s")


def test_the_trained_model_keeps_the_room_and_moves_the_agent() -> None:
    net, _ = load_net()
    state = game.new_game(11, "ocean")
    actions = ["right"] * 6 + ["down"] * 6
    frames = rollout(net, game.render(state), actions, ["ocean"] * len(actions), seed=11)
    states = [state]
    for action in actions:
        states.append(game.step(states[-1], action))
    truth = np.stack([game.render(s) for s in states])
    # the room holds: far closer to the game than a frame of the wrong theme is
    wrong_theme = game.render(game.new_game(11, "lava")).astype(int)
    assert np.abs(frames.astype(int) - truth).mean() < 0.25 * np.abs(wrong_theme - truth[0]).mean()
    # and the agent goes where the actions send it, not where it started
    errors = agent_errors(frames[1:], states[1:])
    assert np.mean(errors <= 2.0) >= 0.75
