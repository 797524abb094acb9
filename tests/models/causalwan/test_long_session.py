"""A causal-wan-tiny session of 10,000 frames: RoPE positions stay in the trained range, and
nothing of the session grows with its length (KV pages, model state, live tensors, Python heap).

Driven on the model and its KV pool directly, as the scheduler drives them (plan, step, commit),
at the smallest geometry (2x2 latents, one layer: 16x16 frames) so that 834 chunks fit a CI
budget; the code path is the served one. Prompts change every few chunks (more than the prompt
cache holds) and controls every chunk. "Flat" compares the first thousand frames (after the
window has filled) with the last thousand, never a timing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from livegen.errors import ConfigError
from livegen.models.causalwan import attention
from livegen.models.causalwan.model import CausalWan
from livegen.models.world import Tick, TickMeta
from livegen.runtime.world.kv_pool import Pool
from long_run import FRAMES, Footprint


def controls(chunk: int) -> dict[str, Any]:
    keys = [["KeyW"], ["KeyA", "Space"], []][chunk % 3]
    return {"keys": {"down": keys, "taps": ["KeyD"] if chunk % 5 == 0 else []}, "mouse": {"dx": chunk % 7}}


@pytest.fixture(scope="module")
def small() -> Any:
    from livegen.models.causalwan.loader import build_tiny

    torch.set_num_threads(1)
    return build_tiny(latent_size=2, num_layers=1)


def test_ten_thousand_frames_keep_positions_in_range_and_memory_flat(
    small: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, config = small, small.config
    highest = [-1]
    real_rope = attention.rope

    def rope(transformer: Any, positions: torch.Tensor, height: int, width: int) -> Any:
        highest[0] = max(highest[0], int(positions.max()))
        return real_rope(transformer, positions, height, width)

    monkeypatch.setattr(attention, "rope", rope)
    pool = Pool.for_spec(model.spec, 1024 * 1024)
    storage = model.new_kv_storage(pool.num_pages)
    pool.admit("long")
    footprint = Footprint(lambda: _state(model, pool))
    frames = chunk = 0
    while frames < FRAMES:
        context, write = pool.plan("long", chunk)
        meta = TickMeta("long", f"long-{chunk}", chunk, ())
        tick = Tick(meta, 7, f"a room, take {chunk // 4}", controls(chunk), context, write)
        (out,) = model.step([tick], storage)
        pool.commit("long")
        frames += len(out.frames)
        chunk += 1
        footprint.sample(frames)
    # Positions: a chunk's frames sit right after its context (sink and window), whatever the
    # chunk index, inside the positions the checkpoint was trained on.
    chunk_frames = config.latent_frames_per_chunk
    assert highest[0] == config.sink_frames + config.window_frames + chunk_frames - 1, highest
    assert highest[0] < config.trained_frames
    footprint.check()


def _state(model: Any, pool: Pool) -> tuple[int, ...]:
    """What the session holds: its pages and the pool's free ones, the model's sessions, cached
    prompts, decoder cache (bytes and entries) and own page list."""
    session = model._sessions["long"]
    return (
        len(pool.pages("long")),
        pool.num_free_pages,
        model.num_sessions,
        len(model._prompts),
        session.decoder.nbytes(),
        len(session.decoder.caches or ()),
        len(session.pages),
    )


def test_a_window_wider_than_the_trained_positions_is_refused_at_load(small: Any) -> None:
    """sink + window + a chunk must fit the positions the checkpoint was trained on."""
    config = dataclasses.replace(small.config, trained_frames=small.config.positions_used - 1)
    with pytest.raises(ConfigError, match="RoPE positions"):
        CausalWan("causal-wan", config, small.transformer, small.vae, small.encode_text, small.scheduler)
