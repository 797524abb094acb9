"""moshi-tiny as a LockstepModel: batching, the slot pool, bad frames, bounded state."""

from __future__ import annotations

import numpy as np
import pytest

from livegen.errors import CapacityExceeded
from livegen.models.lockstep import LockstepFrame, LockstepModel
from livegen.models.moshi.model import FrameSizeError

from .inputs import MAX_SESSIONS, WINDOW, frames


def run_alone(model, seed: int, inputs: list[bytes]) -> list[LockstepFrame]:  # type: ignore[no-untyped-def]
    slot = model.open_slot(f"alone-{seed}", seed)
    try:
        return [model.step([slot], [frame])[0] for frame in inputs]
    finally:
        model.close_slot(slot)


def pcm(frame: LockstepFrame) -> np.ndarray:
    return np.frombuffer(frame.audio, dtype="<i2").astype(np.int32)


def assert_same(alone: list[LockstepFrame], batched: list[LockstepFrame]) -> None:
    # Sampled tokens must match exactly; audio within 2 PCM16 steps: a row's float sums may round
    # differently at another batch size (kernels block differently), never by more.
    assert [f.text for f in alone] == [f.text for f in batched]
    assert [f.speaking for f in alone] == [f.speaking for f in batched]
    assert max(int(np.abs(pcm(a) - pcm(b)).max()) for a, b in zip(alone, batched, strict=True)) <= 2


def test_tiny_is_a_lockstep_model_with_moshi_framing(model) -> None:  # type: ignore[no-untyped-def]
    assert isinstance(model, LockstepModel)
    assert (model.spec.sample_rate, model.spec.frame_samples, model.spec.frame_ms) == (24000, 1920, 80.0)
    slot = model.open_slot("s", 1)
    out = [model.step([slot], [frame])[0] for frame in frames(0, 4)]
    assert all(len(frame.audio) == 2 * 1920 for frame in out)
    # Acoustic codes run one frame late: the first step has no whole frame to speak yet.
    assert not pcm(out[0]).any()
    assert all(pcm(frame).any() for frame in out[1:])


def test_a_batch_gives_each_session_what_it_gets_alone(model) -> None:  # type: ignore[no-untyped-def]
    total = 3 * WINDOW  # past the context window: every ring wraps
    spans = {11: (0, total), 22: (5, 30), 33: (12, total), 44: (0, 9), 55: (20, 26)}
    inputs = {seed: frames(seed, end - start) for seed, (start, end) in spans.items()}
    alone = {seed: run_alone(model, seed, inputs[seed]) for seed in spans}
    got: dict[int, list[LockstepFrame]] = {seed: [] for seed in spans}
    slots: dict[int, int] = {}
    for t in range(total):
        for seed, (start, end) in spans.items():
            if t == start:
                slots[seed] = model.open_slot(f"s{seed}", seed)
            if t == end:
                model.close_slot(slots.pop(seed))
        live = sorted(slots, key=lambda seed: -seed)  # rows not in slot order: the gathered path
        out = model.step([slots[s] for s in live], [inputs[s][t - spans[s][0]] for s in live])
        for seed, frame in zip(live, out, strict=True):
            got[seed].append(frame)
    for seed in spans:
        assert_same(alone[seed], got[seed])


def test_a_session_is_reproducible_from_its_seed_and_seeds_differ(model) -> None:  # type: ignore[no-untyped-def]
    inputs = frames(7, 12)
    first, again, other = (
        run_alone(model, 5, inputs),
        run_alone(model, 5, inputs),
        run_alone(model, 6, inputs),
    )
    assert_same(first, again)
    assert [f.text for f in first] != [f.text for f in other]


def test_the_pool_refuses_a_session_past_max_sessions(model) -> None:  # type: ignore[no-untyped-def]
    held = [model.open_slot(f"s{i}", i) for i in range(MAX_SESSIONS)]
    assert sorted(held) == list(range(MAX_SESSIONS))
    with pytest.raises(CapacityExceeded) as refused:
        model.open_slot("one-too-many", 99)
    assert refused.value.code == "realtime_capacity"
    model.close_slot(held[2])
    assert model.open_slot("after-a-close", 99) == held[2]


def test_a_wrong_size_frame_is_a_typed_error_naming_the_slot_and_leaves_state_alone(model) -> None:  # type: ignore[no-untyped-def]
    inputs = frames(3, 6)
    alone = run_alone(model, 8, inputs)
    good, bad = model.open_slot("good", 8), model.open_slot("bad", 9)
    out = [model.step([good], [inputs[0]])[0]]
    with pytest.raises(FrameSizeError) as error:
        model.step([good, bad], [inputs[1], inputs[1][:1000]])
    assert error.value.slot == bad
    assert "3840 bytes" in error.value.message and "got 1000" in error.value.message
    out += [model.step([good], [frame])[0] for frame in inputs[1:]]  # the failed step changed nothing
    assert_same(alone, out)


def test_a_closed_slot_is_reset_for_its_next_user(model) -> None:  # type: ignore[no-untyped-def]
    inputs = frames(4, 8)
    fresh = run_alone(model, 21, inputs)
    run_alone(model, 20, frames(5, 2 * WINDOW))  # a long session on the same slot, then closed
    assert_same(fresh, run_alone(model, 21, inputs))


def test_state_stays_bounded_however_long_a_session_runs(model) -> None:  # type: ignore[no-untyped-def]
    slot = model.open_slot("long", 1)
    noise = frames(6, 1)[0]
    model.step([slot], [noise])
    before = model.state_bytes()
    for _ in range(4 * WINDOW):
        model.step([slot], [noise])
    assert model.state_bytes() == before
    assert model.kv.cell_pos[slot].max().item() == 4 * WINDOW  # the ring wrapped, kept its newest


def test_text_is_spoken_only_around_word_tokens(model) -> None:  # type: ignore[no-untyped-def]
    out = run_alone(model, 31, frames(8, 30))
    assert any(f.text for f in out)
    assert all(f.speaking for f in out if f.text)
    assert model.health().ready
