"""The pool for models whose chunks are latent frames: pages per chunk from the spec (chunk 0 may
differ), per-session model state counted in admission, and an aborted chunk leaving the context."""

from __future__ import annotations

import pytest

from livegen.errors import CapacityExceeded
from livegen.models.world import KVGeometry, WorldSpec
from livegen.runtime.world.kv_pool import Pool, required_bytes

GEOMETRY = KVGeometry(
    num_layers=2, num_heads=2, head_dim=8, tokens_per_frame=4, window_frames=4, sink_frames=1
)
STATE = 10_000


def spec(**extra: object) -> WorldSpec:
    base: dict[str, object] = {
        "width": 64,
        "height": 64,
        "fps": 16.0,
        "frames_per_chunk": 12,
        "controls": (),
        "kv": GEOMETRY,
        "first_chunk_frames": 9,
        "latent_frames_per_chunk": 3,
    }
    return WorldSpec(**{**base, **extra})  # type: ignore[arg-type]


def test_pages_count_latent_frames_and_media_time_counts_output_frames() -> None:
    s = spec(first_chunk_latent_frames=1)
    assert [s.frames_in_chunk(i) for i in range(3)] == [9, 12, 12]
    assert [s.pages_in_chunk(i) for i in range(3)] == [1, 3, 3]
    assert [s.media_time_ms(i) for i in range(3)] == [0.0, 9 / 16 * 1000, 21 / 16 * 1000]
    pool = Pool.for_spec(s, required_bytes(GEOMETRY, 3, 1))
    pool.admit("a")
    assert len(pool.plan("a", 0)[1]) == 1
    pool.commit("a")
    assert len(pool.plan("a", 1)[1]) == 3


def test_model_state_besides_kv_counts_in_admission() -> None:
    per_session = required_bytes(GEOMETRY, 3, 1) + STATE
    budget = 2 * per_session + STATE // 2
    pool = Pool.for_spec(spec(state_bytes_per_session=STATE), budget)
    assert pool.capacity == 2 and pool.num_pages >= 2 * pool.pages_per_session
    pool.admit("a")
    pool.admit("b")
    with pytest.raises(CapacityExceeded):
        pool.admit("c")
    # Without the state counted, the same budget would have admitted a third session.
    assert Pool.for_spec(spec(), budget).capacity > 2


def test_an_aborted_chunk_gives_its_pages_back_and_keeps_the_context() -> None:
    pool = Pool.for_spec(spec(), required_bytes(GEOMETRY, 3, 1))
    pool.admit("a")
    pool.plan("a", 0)
    pool.commit("a")
    context, _ = pool.plan("a", 1)
    free = pool.num_free_pages
    pool.abort("a")
    assert pool.num_free_pages == free + 3
    assert pool.plan("a", 1)[0] == context


def test_extra_kv_branches_grow_the_page() -> None:
    """Classifier-free guidance keeps two K/V branches, Matrix-Game adds keyboard and mouse caches."""
    two = KVGeometry(
        num_layers=2,
        num_heads=2,
        head_dim=8,
        tokens_per_frame=4,
        window_frames=4,
        sink_frames=1,
        num_branches=2,
    )
    assert two.page_bytes == 2 * GEOMETRY.page_bytes
    assert Pool(two, 3, required_bytes(GEOMETRY, 3, 4)).capacity == 2
