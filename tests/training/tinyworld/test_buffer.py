"""The rollout buffer: the model's own frames as context, beside the game's frames as targets."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from livegen.models.room import game  # noqa: E402
from models.tinyworld.support import random_net  # noqa: E402


def test_rollout_buffer_pairs_the_models_frames_with_the_games() -> None:
    from livegen.models.tinyworld.net import to_uint8
    from livegen.training.tinyworld.buffer import RolloutBuffer

    net = random_net()
    buffer = RolloutBuffer(num_streams=2, context=3, seed=1)
    clip, context = buffer.batch()
    assert clip.frames.shape == (2, 4, 32, 32, 3) and context.shape == (2, 3, 3, 32, 32)
    # fresh streams start from the game's frames; the newest true frame is the game's current state
    assert np.array_equal(to_uint8(context).numpy(), clip.frames[:, :3])
    for i, stream in enumerate(buffer.streams):
        assert np.array_equal(clip.frames[i, -1], game.render(stream.state))
    buffer.advance(net, clip, context, torch.Generator().manual_seed(0))
    clip2, context2 = buffer.batch()
    # the context now ends with the model's own frame, aligned with the game's frame it stands for
    assert np.array_equal(clip2.frames[:, :3], clip.frames[:, 1:])
    assert torch.equal(context2[:, :2], context[:, 1:])
    assert not np.array_equal(to_uint8(context2[:, 2]).numpy(), clip2.frames[:, 2])
