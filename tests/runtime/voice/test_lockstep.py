"""The frame clock of lockstep voice models (``runtime/voice/lockstep.py``), with the deterministic double."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest

from livegen.errors import CapacityExceeded, ModelContractError, ModelError
from livegen.models.lockstep import LockstepFrame, LockstepModel
from livegen.runtime.voice.lockstep import FrameClock, Member
from voice.lockstep_double import FRAME_SAMPLES, POISON, LockstepDouble, pcm

FRAME_BYTES = 2 * FRAME_SAMPLES


async def frames_of(member: Member, count: int) -> list[LockstepFrame | ModelError]:
    return [await asyncio.wait_for(member.outputs.get(), 10) for _ in range(count)]


def speech(ms: int = 120) -> bytes:
    return pcm(ms, True) + pcm(200, False)


def test_the_double_keeps_the_contract() -> None:
    assert isinstance(LockstepDouble(), LockstepModel)


async def test_a_member_whose_input_is_late_gets_silence_and_the_others_their_frames() -> None:
    model = LockstepDouble()
    clock = FrameClock(model)
    said = speech()
    talking = await clock.join("sess_a")
    await talking.put(said)  # queued before the clock's first step
    late = await clock.join("sess_b")
    outputs = await frames_of(talking, 20)
    await frames_of(late, 20)
    await clock.leave(talking)
    await clock.leave(late)
    await clock.stop()
    assert (
        b"".join(model_frames(model, talking.slot)[: len(said) // FRAME_BYTES])
        == said[: len(said) // FRAME_BYTES * FRAME_BYTES]
    )
    assert set(model_frames(model, late.slot)) == {bytes(FRAME_BYTES)}  # silence, every frame
    assert late.late_frames >= 20
    assert any(len(slots) == 2 for slots in model.batches)  # never held back: stepped with the other
    assert any(isinstance(o, LockstepFrame) and o.speaking for o in outputs)  # it answered the speech


def model_frames(model: LockstepDouble, slot: int) -> list[bytes]:
    return model.slots[slot].frames if slot in model.slots else model.closed[slot]


async def test_members_joining_and_leaving_get_what_they_would_get_alone() -> None:
    said = speech() * 2
    alone = LockstepDouble()
    solo_clock = FrameClock(alone)
    solo = await solo_clock.join("sess_solo")
    await solo.put(said)
    expected = await frames_of(solo, 30)
    await solo_clock.stop()

    model = LockstepDouble()
    clock = FrameClock(model)
    first = await clock.join("sess_1")
    await first.put(said)
    await frames_of(first, 5)
    second = await clock.join("sess_2")  # joins mid-run, between frames
    await second.put(said)
    got_first = await frames_of(first, 10)
    await clock.leave(first)  # leaves mid-run
    got_second = await frames_of(second, 30)
    await clock.stop()
    assert [o.audio for o in got_second] == [o.audio for o in expected]  # type: ignore[union-attr]
    assert [o.text for o in got_second] == [o.text for o in expected]  # type: ignore[union-attr]
    assert [o.speaking for o in got_first] == [o.speaking for o in expected[5:15]]  # type: ignore[union-attr]


async def test_a_step_that_raises_fails_only_the_member_whose_frame_it_fails() -> None:
    model = LockstepDouble()
    clock = FrameClock(model)
    members = [await clock.join(f"sess_{i}") for i in range(3)]
    poisoned = np.zeros(FRAME_SAMPLES, "<i2")
    poisoned[0] = POISON
    await members[1].put(poisoned.tobytes())
    results = [await frames_of(member, 1 if member is members[1] else 3) for member in members]
    await clock.stop()
    assert isinstance(results[1][0], ModelError) and "poisoned" in str(results[1][0])
    assert all(isinstance(o, LockstepFrame) for o in results[0] + results[2])
    assert members[1].is_failed and not members[0].is_failed


class WrongSize(LockstepDouble):
    """Breaks the contract for slot 0 only: a frame one sample short."""

    def step(self, slots: Sequence[int], frames: Sequence[bytes]) -> list[LockstepFrame]:
        outputs = super().step(slots, frames)
        return [
            LockstepFrame(o.audio[:-2]) if slot == 0 else o for slot, o in zip(slots, outputs, strict=True)
        ]


async def test_a_frame_of_the_wrong_size_fails_that_member_only() -> None:
    clock = FrameClock(WrongSize())
    broken, fine = await clock.join("sess_a"), await clock.join("sess_b")
    first = (await frames_of(broken, 1))[0]
    others = await frames_of(fine, 3)
    await clock.stop()
    assert isinstance(first, ModelContractError) and f"not {FRAME_BYTES}" in str(first)
    assert all(isinstance(o, LockstepFrame) for o in others)


async def test_a_full_pool_refuses_with_realtime_capacity_and_a_slot_given_back_admits() -> None:
    clock = FrameClock(LockstepDouble(max_sessions=1))
    held = await clock.join("sess_a")
    with pytest.raises(CapacityExceeded) as refused:
        await clock.join("sess_b")
    assert refused.value.code == "realtime_capacity"
    await clock.leave(held)
    again = await clock.join("sess_b")
    assert (await frames_of(again, 1))[0]
    await clock.stop()


async def test_input_past_the_queue_waits_for_the_clock_and_is_never_dropped() -> None:
    model = LockstepDouble()
    clock = FrameClock(model)
    member = await clock.join("sess_a")
    said = np.arange(40 * FRAME_SAMPLES, dtype="<i2").tobytes()  # more than MAX_QUEUED_FRAMES frames
    await member.put(said)  # returns once the clock has taken enough of it
    await frames_of(member, 40)
    await clock.stop()
    assert b"".join(model_frames(model, member.slot)[:40]) == said


async def test_two_clocks_of_one_model_call_it_from_one_thread() -> None:
    model = LockstepDouble()  # loaded once per process: two servers' clocks share it
    clocks = [FrameClock(model), FrameClock(model)]
    members = [await clock.join(f"sess_{i}") for i, clock in enumerate(clocks)]
    for member in members:
        await frames_of(member, 3)
    for clock in clocks:
        await clock.stop()
    assert len(model.thread_ids) == 1
