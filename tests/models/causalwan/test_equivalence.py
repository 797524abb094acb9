"""livegen's served rollout of the tiny causal Wan equals a plain rollout with no cache.

The served side is the model's batched ``step`` on the runtime's paged KV pool,
driven as the scheduler drives it (plan, step, commit; abort or clear on
failure): two sessions batched with different prompts, seeds and controls,
enough chunks for the window to slide past the sink, a chunk that fails and
is retried, an evicted session, and resets. The reference (``reference.py``)
recomputes every chunk from the clean history under a block-causal mask.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from livegen.errors import StateEvicted
from livegen.models.world import Tick, TickMeta
from livegen.runtime.world.kv_pool import Pool

from .reference import Reference

A_CONTROLS: list[dict[str, Any]] = [
    {},
    {"keys": {"down": ["KeyW"], "taps": []}, "mouse": {"dx": 40, "dy": -8, "wheel": 0, "buttons": 0}},
    {"keys": {"down": ["KeyW", "KeyD"], "taps": ["Space"]}},
    {"keys": {"down": [], "taps": []}, "mouse": {"dx": 0, "dy": 0, "wheel": 2, "buttons": 1}},
    {"keys": {"down": ["ArrowLeft"], "taps": []}},
]
B_CONTROLS: list[dict[str, Any]] = [{"mouse": {"dx": -64, "dy": 0, "wheel": 0, "buttons": 0}}, {}, {}, {}]
ATOL = 1e-4


class Served:
    """The model on a KV pool, stepped the way the scheduler steps it."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.pool = Pool.for_spec(model.spec, 64 * 1024 * 1024)
        self.storage = model.new_kv_storage(self.pool.num_pages)
        self.latents: dict[str, torch.Tensor] = {}
        self.n = 0
        model.on_latents = lambda request_id, latents: self.latents.__setitem__(request_id, latents.clone())

    def tick(self, session: str, chunk: int, seed: int, prompt: str, controls: dict[str, Any]) -> Tick:
        self.pool.admit(session)
        context, write = self.pool.plan(session, chunk)
        self.n += 1
        meta = TickMeta(session, f"{session}-{chunk}-{self.n}", chunk, ())
        return Tick(meta, seed, prompt, controls, context, write)

    def step(self, ticks: list[Tick]) -> list[tuple[np.ndarray, torch.Tensor]]:
        try:
            chunks = self.model.step(ticks, self.storage)
        except Exception:
            for tick in ticks:
                self.pool.abort(tick.meta.session_id)
            raise
        for tick in ticks:
            self.pool.commit(tick.meta.session_id)
        return [(c.frames, self.latents[c.meta.request_id]) for c in chunks]


@pytest.fixture(scope="module")
def reference(model: Any) -> Reference:
    return Reference(model)


def test_served_rollout_equals_the_plain_rollout_without_cache(
    model: Any, reference: Reference, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = Served(model)
    ref_a = reference.rollout(1, "a red room", A_CONTROLS)
    ref_b = reference.rollout(2, "blue sky", B_CONTROLS)
    frames_a: list[np.ndarray] = []
    for chunk in range(4):
        ticks = [served.tick("A", chunk, 1, "a red room", A_CONTROLS[chunk])]
        ticks.append(served.tick("B", chunk, 2, "blue sky", B_CONTROLS[chunk]))
        (fa, la), (_, lb) = served.step(ticks)
        torch.testing.assert_close(la, ref_a[chunk], atol=ATOL, rtol=0)
        torch.testing.assert_close(lb, ref_b[chunk], atol=ATOL, rtol=0)
        frames_a.append(fa)
    assert len(served.pool.pages("A")) == 1 + 3  # the sink and the window: frames 1 and 2 are evicted

    # A chunk that fails after its passes ran leaves the cache and the session as they were.
    real_decode = model._decode
    monkeypatch.setattr(model, "_decode", lambda job: (_ for _ in ()).throw(RuntimeError("decoder died")))
    with pytest.raises(RuntimeError):
        served.step([served.tick("A", 4, 1, "a red room", A_CONTROLS[4])])
    monkeypatch.setattr(model, "_decode", real_decode)
    ((fa, la),) = served.step([served.tick("A", 4, 1, "a red room", A_CONTROLS[4])])
    torch.testing.assert_close(la, ref_a[4], atol=ATOL, rtol=0)
    frames_a.append(fa)

    # The streamed frames equal the stock VAE decoding the whole reference rollout in one call.
    one_shot = reference.frames(ref_a).numpy().astype(int)
    streamed = np.concatenate(frames_a).astype(int)
    assert streamed.shape == one_shot.shape == (9 + 4 * 12, 64, 64, 3)
    assert np.abs(streamed - one_shot).max() <= 1

    # Evicted: B's state is gone, its next chunk says so instead of restarting the world.
    model.release("B")
    with pytest.raises(StateEvicted):
        model.step([served.tick("B", 4, 2, "blue sky", {})], served.storage)
    served.pool.clear("B")
    # Reset: B starts over with another seed, A starts over with its own; both batched again.
    served.pool.clear("A")
    ref_b3 = reference.rollout(3, "blue sky", B_CONTROLS[:2])
    for chunk in range(2):
        ticks = [served.tick("B", chunk, 3, "blue sky", B_CONTROLS[chunk])]
        ticks.append(served.tick("A", chunk, 1, "a red room", A_CONTROLS[chunk]))
        (_, lb), (fa, la) = served.step(ticks)
        torch.testing.assert_close(lb, ref_b3[chunk], atol=ATOL, rtol=0)
        torch.testing.assert_close(la, ref_a[chunk], atol=ATOL, rtol=0)
        # The same rollout again, in another row of another batch: equal within rounding.
        assert np.abs(fa.astype(int) - frames_a[chunk]).max() <= 1


def test_without_a_pool_the_model_keeps_its_own_pages_and_agrees(model: Any, reference: Reference) -> None:
    ref = reference.rollout(5, "", A_CONTROLS[:4])
    got = {}
    model.on_latents = lambda request_id, latents: got.__setitem__(request_id, latents.clone())
    for chunk in range(4):
        model.step([Tick(TickMeta("solo", f"s{chunk}", chunk, ()), 5, "", A_CONTROLS[chunk])], None)
        torch.testing.assert_close(got[f"s{chunk}"], ref[chunk], atol=ATOL, rtol=0)
    model.release("solo")


def test_a_recorded_session_replays_bit_identically(model: Any) -> None:
    def run() -> list[np.ndarray]:
        served = Served(model)
        out = []
        for chunk in range(3):
            ticks = [
                served.tick("R", chunk, 9, "replay", A_CONTROLS[chunk]),
                served.tick("S", chunk, 4, "x", {}),
            ]
            out.extend(frames for frames, _ in served.step(ticks)[:1])
        model.release("R")
        model.release("S")
        return out

    first, again = run(), run()
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert [f.shape[0] for f in first] == [9, 12, 12]


def test_controls_change_the_chunk_they_apply_to_and_taps_act(model: Any) -> None:
    def chunk1(controls: dict[str, Any]) -> torch.Tensor:
        served = Served(model)
        served.step([served.tick("C", 0, 7, "", {})])
        ((_, latents),) = served.step([served.tick("C", 1, 7, "", controls)])
        model.release("C")
        return latents

    still = chunk1({})
    assert not torch.allclose(still, chunk1({"keys": {"down": [], "taps": ["Space"]}}))
    assert not torch.allclose(still, chunk1({"mouse": {"dx": 30, "dy": 0, "wheel": 0, "buttons": 0}}))
    torch.testing.assert_close(still, chunk1({"keys": {"down": ["KeyQ"], "taps": []}}), atol=0, rtol=0)
