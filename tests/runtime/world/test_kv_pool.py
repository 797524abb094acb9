"""The paged KV pool: admission formula, sink and window, pages freed on clear and release."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from livegen.errors import CapacityExceeded, ConfigError, LocalProtocolError
from livegen.models.world import KVGeometry
from livegen.runtime.world.kv_pool import Pool, pages_per_session, required_bytes

GEOMETRY = KVGeometry(
    num_layers=2, num_heads=2, head_dim=8, tokens_per_frame=4, window_frames=4, sink_frames=2
)
FRAMES_PER_CHUNK = 2


def pool_for(num_sessions: int, spare_bytes: int = 0) -> Pool:
    budget = required_bytes(GEOMETRY, FRAMES_PER_CHUNK, num_sessions) + spare_bytes
    return Pool(GEOMETRY, FRAMES_PER_CHUNK, budget)


def test_admission_formula() -> None:
    assert GEOMETRY.page_bytes == 2 * (2 * 2 * 4 * 8) * 4
    assert pages_per_session(GEOMETRY, FRAMES_PER_CHUNK) == 2 + 4 + 2
    pool = pool_for(3, spare_bytes=GEOMETRY.page_bytes * 7)
    assert pool.capacity == 3 and pool.num_pages == 3 * 8 + 7


def test_full_pool_refuses_cleanly_and_admits_after_release() -> None:
    pool = pool_for(2)
    pool.admit("a")
    pool.admit("b")
    assert pool.is_full
    with pytest.raises(CapacityExceeded) as error:
        pool.admit("c")
    assert error.value.code == "kv_pool_full"
    pool.release("a")
    pool.admit("c")


def test_budget_below_one_session_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        Pool(GEOMETRY, FRAMES_PER_CHUNK, required_bytes(GEOMETRY, FRAMES_PER_CHUNK, 1) - 1)


def test_sinks_are_kept_and_the_window_slides() -> None:
    pool = pool_for(1)
    pool.admit("a")
    written: list[int] = []
    for _ in range(5):
        context, write = pool.plan("a")
        assert len(write) == FRAMES_PER_CHUNK and not set(write) & set(context)
        written.extend(write)
        pool.commit("a")
    context, write = pool.plan("a")
    assert context[:2] == tuple(written[:2]), "sink frames stay first"
    assert context[2:] == tuple(written[-4:]), "then the last window_frames, oldest first"
    pool.commit("a")


def test_clear_frees_pages_but_keeps_admission() -> None:
    pool = pool_for(1)
    pool.admit("a")
    pool.plan("a")
    pool.commit("a")
    pool.plan("a")
    pool.clear("a")
    assert pool.num_free_pages == pool.num_pages and pool.num_sessions == 1
    assert pool.plan("a")[0] == ()
    with pytest.raises(LocalProtocolError):
        pool.plan("a")  # one chunk at a time


@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from(["plan", "commit", "clear", "release"]))))
def test_pages_are_never_shared_or_lost(ops: list[tuple[str, str]]) -> None:
    pool = pool_for(3)
    writing: set[str] = set()
    for session, op in ops:
        pool.admit(session)
        if op == "plan" and session not in writing:
            pool.plan(session)
            writing.add(session)
        elif op == "commit" and session in writing:
            pool.commit(session)
            writing.discard(session)
        elif op in ("clear", "release"):
            getattr(pool, op)(session)
            writing.discard(session)
        held = [page for s in "abc" if s in pool._sessions for page in pool.pages(s)]
        assert len(held) == len(set(held)), "a page held twice"
        assert sorted(held + pool._free) == list(range(pool.num_pages)), "a page lost"
        for s in "abc":
            if s in pool._sessions:
                assert len(pool.pages(s)) <= pool.pages_per_session
