"""A cluster's lockstep service (``cluster/lockstep.py``) as its server processes see
it: ``RemoteClock`` and ``RemoteMember`` against the service's own body, with the deterministic
double, through an in-process stand-in of a Ray actor handle (each call a task, awaitable as
Ray's object refs are; ``kill`` fails the calls in flight and the next ones, as a dead actor's).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from livegen.cluster.lockstep import LockstepService, RemoteClock, RemoteMember
from livegen.errors import CapacityExceeded, LockstepServiceUnavailable
from livegen.models import Kind, ModelInfo
from livegen.models.lockstep import LockstepFrame
from voice.lockstep_double import FRAME_SAMPLES, LockstepDouble, pcm

FRAME_BYTES = 2 * FRAME_SAMPLES


class ActorDied(Exception):
    """What a dead actor's calls raise (Ray's ``RayActorError``, in shape)."""


class Handle:
    """An actor handle, in process: ``handle.method.remote(*args)`` runs ``body.method`` as a task."""

    def __init__(self, body: LockstepService) -> None:
        self.body = body
        self.dead = False
        self.pending: set[asyncio.Future[Any]] = set()
        self.calls: list[str] = []
        self.polled: list[list[str]] = []  # the keys of each poll
        self.tasks: set[asyncio.Task[Any]] = set()

    def __getattr__(self, name: str) -> Any:
        handle = self

        class Method:
            @staticmethod
            def remote(*args: Any) -> asyncio.Future[Any]:
                return handle.call(name, *args)

        return Method

    def call(self, name: str, *args: Any) -> asyncio.Future[Any]:
        self.calls.append(name)
        if name == "poll":
            self.polled.append(list(args[0]))
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.dead:
            answer.set_exception(ActorDied("the actor died"))
            return answer
        task = asyncio.ensure_future(getattr(self.body, name)(*args))
        self.tasks.add(task)
        self.pending.add(answer)

        def settle(done: asyncio.Task[Any]) -> None:
            self.tasks.discard(done)
            self.pending.discard(answer)
            if answer.done():
                return
            if done.cancelled():
                answer.cancel()
            elif (exc := done.exception()) is not None:
                answer.set_exception(exc)
            else:
                answer.set_result(done.result())

        task.add_done_callback(settle)
        return answer

    def kill(self) -> None:
        self.dead = True
        for answer in list(self.pending):
            if not answer.done():
                answer.set_exception(ActorDied("the actor died"))


def body(loader: str = "load", orphan_s: float = 5.0) -> LockstepService:
    entry = ModelInfo("duplex", Kind.VOICE, f"voice.lockstep_double:{loader}", "a double", lockstep=True)
    service = LockstepService(entry, None, headroom=0.9)
    service.orphan_s = orphan_s
    return service


def remote(service: LockstepService) -> tuple[RemoteClock, Handle]:
    handle = Handle(service)
    return RemoteClock(handle, {"name": service.name, "spec": [24_000, FRAME_SAMPLES, 4]}), handle


async def frames_of(member: RemoteMember, count: int) -> list[Any]:
    return [await asyncio.wait_for(member.outputs.get(), 10) for _ in range(count)]


async def test_a_remote_member_is_stepped_by_the_service_and_hears_its_own_input() -> None:
    service = body()
    clock, handle = remote(service)
    talking = await clock.join("sess_a", seed=1)
    quiet = await clock.join("sess_b", seed=2)
    said = pcm(120, True) + pcm(200, False)
    await talking.put(said)
    outputs = await frames_of(talking, 20)
    await frames_of(quiet, 5)
    assert all(isinstance(o, LockstepFrame) and len(o.audio) == FRAME_BYTES for o in outputs)
    assert any(o.speaking for o in outputs)  # the double answered the speech it heard there
    model = service.model
    assert isinstance(model, LockstepDouble)
    heard = b"".join(model.slots[talking.slot].frames)
    assert said[: len(said) // FRAME_BYTES * FRAME_BYTES] in heard  # after silence while it was late
    assert quiet.late_frames > 0 and clock.steps > 0  # the service's figures, as the polls brought them
    assert handle.calls.count("put") == 1  # one call per put
    both = sorted([talking.key, quiet.key])
    assert both in [sorted(keys) for keys in handle.polled]  # one poll brings every member's frames
    await clock.leave(talking)
    assert talking.slot not in model.slots  # the slot was given back in the service
    await clock.stop()
    assert not model.slots and not service.members


async def test_the_services_pool_refuses_with_realtime_capacity_and_frees_a_left_slot() -> None:
    service = body("load_one_slot")
    one, _ = remote(service)
    other, _ = remote(service)  # another process of the cluster
    held = await one.join("sess_a")
    with pytest.raises(CapacityExceeded) as refused:
        await other.join("sess_b")
    assert refused.value.code == "realtime_capacity" and "pool is full" in refused.value.message
    await one.leave(held)
    again = await other.join("sess_b")
    assert isinstance((await frames_of(again, 1))[0], LockstepFrame)
    await other.stop()
    await one.stop()


async def test_a_member_whose_polls_stop_is_freed_and_its_slot_reused() -> None:
    service = body("load_one_slot", orphan_s=0.3)
    gone, _ = remote(service)
    await gone.join("sess_gone")
    assert gone.poller is not None
    gone.poller.cancel()  # its process died: no more polls, no leave
    other, _ = remote(service)
    for _ in range(50):
        try:
            admitted = await other.join("sess_next")
            break
        except CapacityExceeded:
            await asyncio.sleep(0.05)
    else:
        raise AssertionError("the orphaned slot was never freed")
    assert service.orphans_freed == 1
    assert isinstance((await frames_of(admitted, 1))[0], LockstepFrame)
    await other.stop()


async def test_a_service_that_dies_fails_its_members_with_the_services_code() -> None:
    service = body()
    clock, handle = remote(service)
    member = await clock.join("sess_a")
    await frames_of(member, 2)
    handle.kill()
    failure = await asyncio.wait_for(drain_to_failure(member), 10)
    assert isinstance(failure, LockstepServiceUnavailable)
    assert failure.code == "lockstep_service_unavailable" and service.name in str(failure)
    assert member.is_failed and not clock.model.health().ready
    await member.put(pcm(40, True))  # input for a lost member is dropped, nothing raised
    with pytest.raises(LockstepServiceUnavailable):
        await clock.join("sess_b")  # while it is down, a join fails plainly (the session is refused)
    await clock.stop()
    await service.clock.stop()


async def test_a_restarted_service_fails_the_members_it_no_longer_knows_and_admits_new_ones() -> None:
    clock, handle = remote(body())
    member = await clock.join("sess_a")
    await frames_of(member, 1)
    handle.body = body()  # Ray restarted it between two polls: a fresh clock, no members
    failure = await asyncio.wait_for(drain_to_failure(member), 10)
    assert isinstance(failure, LockstepServiceUnavailable) and "restarted" in str(failure)
    fresh = await clock.join("sess_b")
    assert isinstance((await frames_of(fresh, 1))[0], LockstepFrame)
    await clock.stop()


async def test_appends_short_of_a_frame_wait_here_and_cross_as_whole_frames() -> None:
    service = body()
    clock, handle = remote(service)
    member = await clock.join("sess_a")
    half = pcm(20, True)  # half of a 40 ms frame
    await member.put(half)
    assert handle.calls.count("put") == 0  # nothing the clock could step yet
    await member.put(half + half)
    assert handle.calls.count("put") == 1
    assert not service.members[member.key]._partial  # whole frames only; the rest waits here
    model = service.model
    assert isinstance(model, LockstepDouble)
    for _ in range(100):
        if half + half in model.slots[member.slot].frames:
            break
        await frames_of(member, 1)
    assert half + half in model.slots[member.slot].frames  # stepped as one frame
    member.clear()
    await member.put(half)
    assert handle.calls.count("put") == 1  # the half cleared here does not complete this one
    await clock.stop()


async def test_a_clear_drops_the_input_queued_in_the_service() -> None:
    service = body()
    clock, _ = remote(service)
    member = await clock.join("sess_a")
    await member.put(pcm(400, True))
    queued = service.members[member.key]
    member.clear()
    await asyncio.sleep(0)  # the fire-and-forget call runs
    await asyncio.sleep(0)
    assert not queued._frames and not queued._partial
    await clock.stop()


async def drain_to_failure(member: RemoteMember) -> Any:
    while True:
        output = await member.outputs.get()
        if not isinstance(output, LockstepFrame):
            return output


async def test_a_service_gone_for_good_is_found_again_on_the_next_join() -> None:
    dead = Handle(body())
    dead.kill()  # killed by hand, never restarted
    again = Handle(body())
    clock = RemoteClock(dead, {"name": "duplex", "spec": [24_000, FRAME_SAMPLES, 4]}, lambda: again)
    with pytest.raises(LockstepServiceUnavailable):
        await clock.join("sess_a")
    member = await clock.join("sess_b")  # looked up (or created) again: the new one admits
    assert isinstance((await frames_of(member, 1))[0], LockstepFrame)
    assert clock.actor is again
    await clock.stop()
