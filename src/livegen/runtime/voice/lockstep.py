"""The frame clock: every live session of a lockstep voice model, stepped in one batch per frame.

A native full-duplex model (``models/lockstep.py``) hears and speaks at once,
one fixed frame in and one out per frame period, for every session. One
``FrameClock`` per loaded lockstep model runs a loop: each period it takes
each member's next input frame (a member whose input is late gets silence for
that frame, so one slow client never stalls the batch), calls
``model.step(slots, frames)`` once, in the model's one worker thread (never on
the event loop; slots are opened and closed in that thread too, so they
always land between steps; servers of one process share the model and its
thread), and hands each member its ``LockstepFrame``.
Sessions join and leave between frames (continuous batching).

Admission (as the world scheduler admits, ``runtime/world/scheduler.py``): a
session is refused with ``CapacityExceeded`` (``realtime_capacity``) when the
model's slot pool is full (``open_slot`` raises it) or when the measured step
time (the median of the last ``STEP_COST_STEPS`` steps) already needs more than
``headroom`` of the frame period: one more session would make every session
miss frames.

Failures are isolated: a step that raises is bisected (its members stepped
again in halves, down to single members) so only a member whose own frame
fails gets the error, and the others their frames; a step that breaks the
contract (a frame of the wrong size for one member) fails that member only.
A failed member's session ends (its stream reports the error); the batch goes on.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import statistics
import threading
import time
import weakref
from collections.abc import Callable, Sequence, Sized
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from livegen.errors import CapacityExceeded, ModelContractError, ModelError
from livegen.logs import log_event
from livegen.models.lockstep import LockstepFrame, LockstepModel, LockstepSpec
from livegen.models.voice import ModelHealth
from livegen.tasks import TaskSet

logger = logging.getLogger("livegen.runtime.voice.lockstep")

#: Steps whose median time admission reads (a neighbour's burst does not halve the capacity).
STEP_COST_STEPS = 16
#: Input frames a member may have queued ahead of the clock (its appends then wait: backpressure).
MAX_QUEUED_FRAMES = 25
#: Output frames a member may have waiting for its session; past it, that session fails.
MAX_UNREAD_FRAMES = 250

#: What a member's outputs carry: a frame, or the failure that ends its session.
Delivered = LockstepFrame | ModelError

#: The one worker thread of each loaded model, shared by every clock of it (a model is loaded once
#: per process, and servers in one process share it: its calls must still come from one thread).
_WORKERS: weakref.WeakKeyDictionary[LockstepModel, ThreadPoolExecutor] = weakref.WeakKeyDictionary()
_WORKERS_LOCK = threading.Lock()


def worker_of(model: LockstepModel) -> ThreadPoolExecutor:
    """The model's one worker thread (made on first use)."""
    with _WORKERS_LOCK:
        if (worker := _WORKERS.get(model)) is None:
            worker = _WORKERS[model] = ThreadPoolExecutor(1, thread_name_prefix="livegen-lockstep")
        return worker


class Seat:
    """What a session reads of its seat: its output frames, its late frames, whether it failed.
    A ``Member`` here, or a cluster's remote one (``cluster.lockstep.RemoteMember``)."""

    def __init__(self, session_id: str, slot: int) -> None:
        self.session_id = session_id
        self.slot = slot
        self.outputs: asyncio.Queue[Delivered] = asyncio.Queue()
        #: Frames stepped with silence because this member's input was late.
        self.late_frames = 0
        self.is_failed = False

    def deliver(self, result: Delivered) -> None:
        if self.is_failed:
            return
        if isinstance(result, ModelError):
            self.is_failed = True
        elif self.outputs.qsize() >= MAX_UNREAD_FRAMES:  # the session stopped reading its frames
            self.is_failed = True
            result = ModelError(f"the session fell {MAX_UNREAD_FRAMES} frames behind the clock")
        self.outputs.put_nowait(result)


class Member(Seat):
    """One session's seat at the clock: its slot, its input frames and its output frames."""

    def __init__(self, session_id: str, slot: int, frame_bytes: int) -> None:
        super().__init__(session_id, slot)
        self.frame_bytes = frame_bytes
        self.silence = bytes(frame_bytes)
        self._partial = bytearray()
        self._frames: collections.deque[bytes] = collections.deque()
        self._room = asyncio.Event()
        self._room.set()

    async def put(self, pcm: bytes) -> None:
        """Input PCM16 at the model rate, cut into frames; waits while ``MAX_QUEUED_FRAMES`` are queued."""
        self._partial += pcm
        while len(self._partial) >= self.frame_bytes:
            while len(self._frames) >= MAX_QUEUED_FRAMES:
                self._room.clear()
                await self._room.wait()
            self._frames.append(bytes(self._partial[: self.frame_bytes]))
            del self._partial[: self.frame_bytes]

    def clear(self) -> None:
        """Drop input not yet stepped (the client cleared its buffer)."""
        self._partial.clear()
        self._frames.clear()
        self._room.set()

    def take_frame(self) -> bytes:
        """The next input frame, or silence when the client's input is late."""
        if not self._frames:
            self.late_frames += 1
            return self.silence
        frame = self._frames.popleft()
        self._room.set()
        return frame


class FrameClock:
    """One lockstep model's loop: one batched step per frame period for every member."""

    def __init__(
        self,
        model: LockstepModel,
        headroom: float = 0.9,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.model = model
        spec = model.spec
        self.period_s = spec.frame_ms / 1000.0
        self.frame_bytes = 2 * spec.frame_samples
        #: The share of the frame period a step may take before new sessions are refused (0: never).
        self.headroom = headroom
        self.clock = clock
        self.members: dict[int, Member] = {}
        self._step_costs: collections.deque[float] = collections.deque(maxlen=STEP_COST_STEPS)
        self._executor = worker_of(model)
        self._task: asyncio.Task[None] | None = None
        #: The frame clock's task, cancelled and awaited by ``stop``.
        self._tasks = TaskSet()
        #: Frames the clock stepped late (a step ran past the next frame's time), and steps made.
        self.missed_frames = 0
        self.steps = 0
        #: Set once the running step has delivered its frames (then replaced for the next).
        self._stepped = asyncio.Event()

    # -- admission -------------------------------------------------------------------------
    @property
    def step_cost_s(self) -> float | None:
        """The median time of recent steps (None until one has been measured)."""
        return statistics.median(self._step_costs) if self._step_costs else None

    @property
    def is_full(self) -> bool:
        """The measured step already needs ``headroom`` of the frame period: no one more fits."""
        cost = self.step_cost_s
        if cost is None or not self.members or self.headroom <= 0:
            return False
        return cost >= self.headroom * self.period_s

    async def join(self, session_id: str, seed: int = 0) -> Member:
        """Seat a session at the clock (raises ``CapacityExceeded``, ``realtime_capacity``, if full)."""
        if self.is_full:
            raise self._refusal(
                f"the frame clock is full: a step of {len(self.members)} sessions already takes "
                f"{1000 * (self.step_cost_s or 0):.1f} ms of each {1000 * self.period_s:.0f} ms frame"
            )
        loop = asyncio.get_running_loop()
        try:
            slot = await loop.run_in_executor(self._executor, self.model.open_slot, session_id, seed)
        except CapacityExceeded as exc:
            raise self._refusal(f"the model's state pool is full ({exc.message})") from exc
        member = Member(session_id, slot, self.frame_bytes)
        self.members[slot] = member
        if self._task is None or self._task.done():
            self._task = self._tasks.spawn(self._run(), name="livegen-frame-clock")
        return member

    @staticmethod
    def _refusal(why: str) -> CapacityExceeded:
        return CapacityExceeded(f"{why}; retry later", code="realtime_capacity")

    async def leave(self, member: Member) -> None:
        """Give the member's slot back, between steps (the worker thread runs one thing at a time)."""
        if self.members.pop(member.slot, None) is None:
            return
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self.model.close_slot, member.slot)
        except Exception as exc:  # a slot that will not close is logged; the others go on
            log_event(logger, "lockstep.close_failed", logging.ERROR, slot=member.slot, error=repr(exc))

    async def stepped(self) -> None:
        """Until the next step has delivered its frames (a cluster's poll waits on it)."""
        await self._stepped.wait()

    async def stop(self) -> None:
        await self._tasks.aclose()

    # -- the loop --------------------------------------------------------------------------
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = self.clock()
        while self.members:
            members = [m for m in self.members.values() if not m.is_failed]
            if not members:  # only failed members, waiting for their sessions to leave
                await asyncio.sleep(self.period_s)
                continue
            frames = [member.take_frame() for member in members]
            started = self.clock()
            results = await loop.run_in_executor(self._executor, self._step_isolated, members, frames)
            self._step_costs.append(self.clock() - started)
            self.steps += 1
            for member, result in zip(members, results, strict=True):
                member.deliver(result)
            stepped, self._stepped = self._stepped, asyncio.Event()
            stepped.set()
            next_at += self.period_s
            now = self.clock()
            if now > next_at:  # late: step at once, and never burst to catch up
                self.missed_frames += int((now - next_at) / self.period_s) + 1
                next_at = now
            await asyncio.sleep(next_at - now)

    def _step_isolated(self, members: Sequence[Member], frames: Sequence[bytes]) -> list[Delivered]:
        """One step for all; where it raises, halves, down to the member whose frame fails alone."""
        try:
            outputs = self.model.step([m.slot for m in members], frames)
        except Exception as exc:
            if len(members) == 1:
                log_event(
                    logger, "lockstep.step_failed", logging.ERROR, slot=members[0].slot, error=repr(exc)
                )
                error = ModelError(f"the model failed this session's frame: {type(exc).__name__}: {exc}")
                error.__cause__ = exc
                return [error]
            half = len(members) // 2
            return [
                *self._step_isolated(members[:half], frames[:half]),
                *self._step_isolated(members[half:], frames[half:]),
            ]
        if len(outputs) != len(members):
            error = ModelContractError(f"step returned {len(outputs)} frames for {len(members)} slots")
            return [error for _ in members]
        return [self._checked(output) for output in outputs]

    def _checked(self, output: LockstepFrame) -> Delivered:
        if not isinstance(output, LockstepFrame) or len(output.audio) != self.frame_bytes:
            size = len(output.audio) if isinstance(output, LockstepFrame) else type(output).__name__
            return ModelContractError(f"the model returned a frame of {size} bytes, not {self.frame_bytes}")
        return output


class Place(Protocol):
    """A session's seat as its stream uses it: a ``Member`` here, a cluster's ``RemoteMember``."""

    outputs: asyncio.Queue[Delivered]

    async def put(self, pcm: bytes) -> None: ...

    def clear(self) -> None: ...


class ClockedModel(Protocol):
    """What a session reads of the model behind a clock: here the model, in a cluster its face."""

    @property
    def spec(self) -> LockstepSpec: ...

    def health(self) -> ModelHealth: ...


class Clock(Protocol):
    """A lockstep model's frame clock as the voice engine serves it: this process's ``FrameClock``,
    or a cluster's one clock for every process (``cluster/lockstep.py``'s ``RemoteClock``), which
    the engine is handed (``runtime/voice/models.py``'s ``SharedLockstep``) and never imports."""

    @property
    def model(self) -> ClockedModel: ...

    @property
    def members(self) -> Sized: ...

    @property
    def step_cost_s(self) -> float | None: ...

    @property
    def missed_frames(self) -> int: ...

    async def join(self, session_id: str, seed: int = 0) -> Place: ...

    # Any: each clock takes back the seats it gave (a Member, a RemoteMember), no other.
    async def leave(self, member: Any) -> None: ...

    async def stop(self) -> None: ...


__all__ = ["MAX_QUEUED_FRAMES", "Clock", "ClockedModel", "FrameClock", "Member", "Place", "Seat"]
