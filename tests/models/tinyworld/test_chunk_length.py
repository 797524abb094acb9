"""tiny-world's chunk length as a serving choice: 1, 2 or 4 frames a chunk, the same contract.

A small randomly initialised network, as in ``test_tiny_world.py``: the
contract does not depend on what the weights learned. The runtime's real KV
pool plans the pages, so its bookkeeping for short chunks is checked against
the model's own cache.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

import torch

from livegen.errors import ConfigError, ModelContractError
from livegen.models import default_registry
from livegen.models.room import game
from livegen.models.tinyworld.model import TinyWorld
from livegen.models.tinyworld.net import Config, Net
from livegen.models.world import Tick, TickMeta
from livegen.runtime.world.kv_pool import Pool, required_bytes
from livegen.server import ServerConfig

ACTIONS = ["right", "right", "down", "down", "left", "none", "up", "up"]


def random_net(seed: int = 0) -> Net:
    """A small net whose zero-initialised gates are perturbed, so every path affects the output."""
    torch.manual_seed(seed)
    net = Net(Config(d_model=32, num_layers=2, num_heads=2, stem_channels=16, up_channels=8))
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return net.eval()


def tick(chunk: int, *, seed: int = 5, context: tuple[int, ...] = (), write: tuple[int, ...] = ()) -> Tick:
    controls = {"action": {"action": ACTIONS[chunk % len(ACTIONS)]}}
    return Tick(TickMeta("s", f"r{chunk}", chunk, ()), seed, "a lava room", controls, context, write)


def play(model: TinyWorld, num_chunks: int, seed: int = 5) -> list[np.ndarray]:
    chunks = [model.step([tick(i, seed=seed)], None)[0].frames for i in range(num_chunks)]
    model.release("s")
    return chunks


@pytest.mark.parametrize("frames_per_chunk", [1, 2])
def test_short_chunks_have_that_many_frames_and_start_from_the_games_first_frame(
    frames_per_chunk: int,
) -> None:
    model = TinyWorld(random_net(), frames_per_chunk=frames_per_chunk)
    assert model.spec.frames_per_chunk == frames_per_chunk
    assert model.spec.media_time_ms(3) == 3 * frames_per_chunk * 1000 / game.FPS
    chunks = play(model, 6)
    assert [c.shape for c in chunks] == [(frames_per_chunk, 32, 32, 3)] * 6
    assert np.array_equal(chunks[0][0], game.render(game.new_game(5, "lava")))
    assert not np.array_equal(chunks[0][0], chunks[-1][-1])  # it moves on, chunk after chunk


@pytest.mark.parametrize("frames_per_chunk", [1, 2])
def test_the_same_seed_and_chunk_length_give_identical_frames(frames_per_chunk: int) -> None:
    """W6 with short chunks: the noise is seeded per chunk, so the chunking is part of the replay."""
    net = random_net()
    first = play(TinyWorld(net, frames_per_chunk=frames_per_chunk), 8)
    again = play(TinyWorld(net, frames_per_chunk=frames_per_chunk), 8)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    other = play(TinyWorld(net, frames_per_chunk=frames_per_chunk), 8, seed=6)
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))


def test_one_frame_chunks_through_the_runtimes_kv_pool_match_the_models_own_cache() -> None:
    """The pool plans one page a chunk (sink first, then a sliding window); the frames are the
    ones the model makes with its own cache."""
    net = random_net()
    own = play(TinyWorld(net, frames_per_chunk=1), 8)
    model = TinyWorld(net, frames_per_chunk=1)
    kv = model.kv_geometry
    pool = Pool.for_spec(model.spec, required_bytes(kv, 1, 1))
    assert pool.pages_per_session == kv.sink_frames + kv.window_frames + 1
    storage = model.new_kv_storage(pool.num_pages)
    pool.admit("s")
    pooled = []
    for chunk in range(8):
        context, write = pool.plan("s", chunk)
        assert len(write) == 1 and len(context) == min(chunk, kv.sink_frames + kv.window_frames)
        pooled.append(model.step([tick(chunk, context=context, write=write)], storage)[0].frames)
        pool.commit("s")
    assert all(np.array_equal(a, b) for a, b in zip(own, pooled, strict=True))


def test_a_chunk_needs_at_least_one_frame() -> None:
    with pytest.raises(ConfigError):
        TinyWorld(random_net(), frames_per_chunk=0)


def test_the_server_option_reaches_tiny_worlds_loader_and_no_other_model() -> None:
    options = ServerConfig(world_frames_per_chunk=2).world_options()
    assert options == {"frames_per_chunk": 2}
    assert "frames_per_chunk" not in ServerConfig().world_options()
    assert default_registry().load("tiny-world", options).spec.frames_per_chunk == 2
    with pytest.raises(ConfigError, match="frames_per_chunk"):  # it makes whole chunks: refused
        default_registry().load("procedural-world", options)


def test_one_frame_chunks_in_a_batch_are_what_each_session_gets_alone() -> None:
    """W6 when short chunks put sessions of different context lengths in one batch: one session
    joins two chunks after the other, so their contexts (1 to 3 frames) differ in most steps."""
    net = random_net()
    alone = [play(TinyWorld(net, frames_per_chunk=1), 6, seed=s) for s in (1, 2)]
    model = TinyWorld(net, frames_per_chunk=1)
    together: dict[str, list[np.ndarray]] = {"p": [], "q": []}
    for step in range(8):
        ticks = []
        for name, seed, chunk in (("p", 1, step), ("q", 2, step - 2)):
            if 0 <= chunk < 6:
                controls = {"action": {"action": ACTIONS[chunk % len(ACTIONS)]}}
                ticks.append(Tick(TickMeta(name, f"{name}{chunk}", chunk, ()), seed, "a lava room", controls))
        for out in model.step(ticks, None):
            together[out.meta.session_id].append(out.frames)
    for frames, expected in zip(together.values(), alone, strict=True):
        assert all(np.array_equal(a, b) for a, b in zip(frames, expected, strict=True))


def test_a_session_asking_for_one_frame_chunks_gets_a_one_frame_servers_frames() -> None:
    """W6 with a per-session chunk length (``session.update`` ``frames_per_chunk``): a 4-frame
    server's model, given ticks of one frame, makes exactly what a 1-frame server's makes (the
    chunk length is part of what must match), and refuses a step mixing lengths."""
    net = random_net()
    own = play(TinyWorld(net, frames_per_chunk=1), 6)
    model = TinyWorld(net, frames_per_chunk=4)
    asked = []
    for i in range(6):
        short = Tick(TickMeta("s", f"r{i}", i, ()), 5, "a lava room", tick(i).controls, num_frames=1)
        asked.append(model.step([short], None)[0].frames)
    assert all(np.array_equal(a, b) for a, b in zip(asked, own, strict=True))
    mixed = [tick(0), Tick(TickMeta("t", "t0", 0, ()), 5, "", {}, num_frames=1)]
    with pytest.raises(ModelContractError, match="share a chunk length"):
        model.step(mixed, None)
