"""The runner of one world session: pacing, flow control, reset and close.

It owns the session's core (``world.Session``) and its sender (``sender.py``:
the one ordered path of messages to its client); the scheduler (``scheduler.py``) owns the model
and calls back into the runner to begin, finish or fail its ticks. All core
calls are synchronous and run on the event loop, so they never interleave;
the only awaits are the worker's release calls and the socket.

Pacing: ``realtime`` paces chunks to the media clock (chunk k may start once
chunk k-1 is due on screen), ``asap`` steps as fast as the model goes. Either
way at most ``max_chunks_ahead`` chunks go beyond the last ``chunk.ack``
(credit: ``world/flow.py``). A client that acks at a chunk's start gets the next
chunk generated while that one plays, started its measured step time (with a
margin) before the client needs it, so it takes in the latest input.
A committed chunk's output sits in the core's effects until this runner moves
it to the send queue, in the same synchronous call as the commit, so no
cancellation can come between them (upstream gap 2).

Output is bounded in bytes, not only in events (``sender.py``): once the
client is over a budget the runner stops stepping. Acks count only chunks
already written to the socket, so a client that acks indexes it never read
cannot open credit for chunks that would only pile up here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from livegen.errors import LivegenError, ModelError
from livegen.logs import log_event
from livegen.models.world import Chunk
from livegen.protocol import world as wire
from livegen.runtime.world.scheduler import Scheduler
from livegen.runtime.world.sender import MAX_QUEUED_EVENTS, SendBytes, Sender, SendText
from livegen.runtime.world.taps import Tap
from livegen.tasks import TaskSet
from livegen.world import (
    Acceptance,
    Event,
    Failure,
    Manager,
    Output,
    Plan,
    Rejection,
    Release,
    Session,
    Status,
)
from livegen.world.flow import FlowControl
from livegen.world.lead import LEAD_FACTOR, LEAD_MARGIN_S, Lead

logger = logging.getLogger("livegen.world")


@dataclass(frozen=True)
class Options:
    """A session's output settings; a ``session.update`` replaces them whole, never edits them.

    Frozen so that a chunk's one snapshot (``sender.py``) cannot change under
    it while it encodes: its header and its frames always agree on the format.
    """

    pacing: str = "realtime"
    format: str = "jpeg"
    quality: int = 85
    max_chunks_ahead: int = 4
    #: The chunk length the session asked for at creation (None: the model's); fixed after.
    frames_per_chunk: int | None = None
    #: Whether the session asked to be recorded (``session.update`` ``recording``); fixed after.
    recording: bool = False


class Runner:
    def __init__(
        self,
        session: Session,
        manager: Manager,
        scheduler: Scheduler,
        send_text: SendText,
        send_bytes: SendBytes,
        options: Options,
        on_error: Callable[[str], None] = lambda code: None,
        max_unsent_bytes: int | None = None,
    ) -> None:
        self.session = session
        self.session_id = session.session_id
        self.options = options
        self._manager = manager
        self._scheduler = scheduler
        #: The model's spec as this session sees it: its own chunk length (``WorldSpec.for_session``).
        self.spec = spec = scheduler.spec.for_session(options.frames_per_chunk)
        self._chunk_s = spec.frames_per_chunk / spec.fps
        self._clock = scheduler.clock
        self._anchor = self._clock()
        self.flow = FlowControl()
        #: How long before the client needs a chunk it must start (``world/lead.py``).
        self._lead = Lead()
        self._ticking: Plan | None = None
        self._queue_ms = 0.0
        self._ready_since = self._anchor
        #: Set while a reset or close waits for the tick in flight: no new tick may start.
        self._is_holding = False
        self._timings: dict[str, tuple[float, float]] = {}
        self._settled = asyncio.Event()
        self._settled.set()
        #: The one ordered path to the client (``sender.py``): its queue, its budgets, its writer.
        self.sender = Sender(self, send_text, send_bytes, on_error, max_unsent_bytes)
        #: The sender and the background releases of failed ticks: ended by ``abort_sending``/``stop``.
        self._tasks = TaskSet()
        #: Who else sees the session's output: its recording, its spectators (``taps.py``).
        self.taps: list[Tap] = []
        #: Each joined player's error sink (``players.py``): a refusal of its events is its own.
        self.guests: dict[int, Callable[[LivegenError], None]] = {}

    def start(self) -> None:
        self._scheduler.add(self)  # first: a full KV pool refuses before anything starts
        self.sender.start(self._tasks)

    @property
    def is_realtime(self) -> bool:
        return self.options.pacing == "realtime"

    def restart_clock(self, phase: Callable[[float], float]) -> None:
        """Anchor the media clock so the next chunk is due now, then at ``phase`` of that anchor
        (the scheduler's: in step with the other realtime sessions, so their chunks batch)."""
        index = self.session.chunk_index
        played_s = self.spec.media_time_ms(index - 1) / 1000 if index else 0.0
        self._anchor = phase(self._clock() - played_s)

    # -- scheduler side --------------------------------------------------------------------
    def _has_credit(self) -> bool:
        return self.flow.has_credit(self.session.chunk_index, self.options.max_chunks_ahead)

    def _deadline(self) -> float:
        """When the next chunk may start: once its predecessor is due on the media clock, and, when
        the client acks at start, no sooner than its step time before the client will need it."""
        if self.options.pacing == "asap":
            return float("-inf")
        index, spec = self.session.chunk_index, self.spec
        if index == 0:
            return self._anchor - self._chunk_s
        deadline = self._anchor + spec.media_time_ms(index - 1) / 1000
        started = self.flow.last_start
        if started is not None and started[0] < index and self._lead.is_measured:
            started_index, started_at = started
            needed_at = started_at + (spec.media_time_ms(index) - spec.media_time_ms(started_index)) / 1000
            deadline = max(deadline, needed_at - self._lead.seconds())
        return deadline

    def _is_ready(self) -> bool:
        if self._is_holding or self._ticking is not None or self.sender.is_overflowing:
            return False
        return self.session.status is Status.ACTIVE and self._has_credit()

    def is_due(self, now: float, early_s: float = 0.0) -> bool:
        """Ready, and due now or within ``early_s`` (the scheduler's window to join a batch)."""
        return self._is_ready() and now + early_s >= self._deadline()

    def next_deadline(self) -> float | None:
        return self._deadline() if self._is_ready() and self.options.pacing == "realtime" else None

    def begin_tick(self, now: float, early_s: float = 0.0) -> Plan | None:
        if not self.is_due(now, early_s):
            return None
        plan = self.session.begin_tick()
        self._ticking = plan
        self._settled.clear()
        self._queue_ms = max(0.0, now - max(self._deadline(), self._ready_since)) * 1000
        self._drain()
        return plan

    def tick_done(self, plan: Plan, chunk: Chunk, model_ms: float) -> None:
        spec = self.spec
        expected = (spec.frames_in_chunk(plan.meta.chunk_index), spec.height, spec.width, 3)
        if tuple(chunk.frames.shape) != expected:
            got = tuple(chunk.frames.shape)
            self.tick_failed(plan, "model_contract_error", f"frames shaped {got}, expected {expected}")
            return
        self._timings[plan.meta.request_id] = (self._queue_ms, model_ms)
        # With the wait for a busy worker: a session that waits starts earlier next time, and
        # sessions that start earlier meet in the same batch.
        self._lead.stepped((self._queue_ms + model_ms) / 1000)
        with contextlib.suppress(ModelError):  # the failure is in the effects, reported below
            self.session.commit_tick(plan, chunk.meta, chunk)
        self._settle()
        # A committed chunk's timing went with its output; a failed commit's must not stay behind
        # (one entry per failure, for as long as the session lives).
        self._timings.pop(plan.meta.request_id, None)

    def tick_failed(self, plan: Plan, code: str, message: str) -> None:
        self.session.fail_tick(plan, code, message)
        log_event(logger, "world.chunk_failed", logging.WARNING, session=self.session_id, code=code)
        self._settle()

    def crashed(self, message: str) -> None:
        """The scheduler dropped this session after a bug; tell the client, which may close."""
        self.sender.queue_error("internal_error", message, None, "server_error")

    def _settle(self) -> None:
        self._ticking = None
        self._ready_since = self._clock()
        self._settled.set()
        self._drain()

    def _drain(self) -> None:
        """Turn the core's effects into messages and releases, in order, without awaiting."""
        for effect in self.session.take_effects():
            if isinstance(effect, Output):
                queue_ms, model_ms = self._timings.pop(effect.meta.request_id, (0.0, 0.0))
                self.flow.committed()
                self.sender.chunk(effect, queue_ms, model_ms)
            elif isinstance(effect, Rejection):
                if effect.player in self.guests:
                    self.guests[effect.player](effect.error)
                elif effect.player == 1:
                    self.sender.send_error(effect.error)
            elif isinstance(effect, Failure):
                code = effect.code if effect.code == "state_evicted" else "chunk_failed"
                message = f"{effect.message}; the session is failed until world.reset"
                self.sender.queue_error(code, message, None, "server_error")
            elif isinstance(effect, Release) and effect.reason == "failed":
                self._tasks.spawn(self._release())

    # -- client side -----------------------------------------------------------------------
    def accept(self, event: Event) -> Acceptance:
        acceptance = self.session.accept(event)
        self.sender.send(
            wire.EventAccepted(event.event_id, acceptance.status.value, acceptance.pending_event_count)
        )
        return acceptance

    def ack(self, chunk_index: int, at: str = "end") -> None:
        """A ``chunk.ack``: credit for chunks written to the socket (``world/flow.py``)."""
        now = self._clock()
        if self.flow.ack(chunk_index, self.session.chunk_index, at, now):
            if at == "start":  # when the client began showing it: was that chunk late?
                self._lead.started(self.spec.media_time_ms(self.flow.acked_through) / 1000, now)
            self._ready_since = max(self._ready_since, now)
            self._scheduler.wake()

    async def _hold(self) -> None:
        """Stop new ticks and wait for the one in flight to settle."""
        self._is_holding = True
        while self._ticking is not None:
            await self._settled.wait()

    async def reset(self) -> None:
        await self._hold()
        try:
            self.session.begin_reset()
            self.session.finish_reset(await self._release())
        finally:
            self._is_holding = False
        self._drain()
        if self.session.status is not Status.ACTIVE:
            self.sender.queue_error(
                "reset_failed", "releasing the model state failed; retry", None, "server_error"
            )
            return
        self.flow.reset()
        self._lead.reset()
        self._anchor = self._ready_since = self._clock()
        self._scheduler.align(self)
        self.sender.send(wire.ResetDone())
        for tap in list(self.taps):
            tap.reset()
        self._scheduler.wake()

    async def close(self, *, is_sending: bool = True) -> None:
        """Close the session (``session.close`` or disconnect); a failed cleanup leaves a tombstone."""
        await self._hold()
        if self.session.begin_close():
            taps, self.taps = self.taps, []
            for tap in taps:
                tap.closed()
            is_released = await self._release()
            self._manager.finish_close(self.session_id, is_released)
            log_event(logger, "world.session_closed", session=self.session_id, is_released=is_released)
            if is_released:
                self._scheduler.remove(self.session_id)
            elif is_sending:
                self.sender.queue_error("cleanup_failed", "closing failed; send session.close again", None)
        if is_sending and self.session.status is Status.CLOSED:
            self.sender.send(wire.SessionClosed())

    async def _release(self) -> bool:
        try:
            await self._scheduler.release_state(self.session_id)
        except Exception as exc:
            log_event(logger, "world.release_failed", logging.ERROR, session=self.session_id, error=repr(exc))
            return False
        return True

    # -- ending ----------------------------------------------------------------------------
    async def flush_and_stop(self, grace_s: float = 5.0) -> None:
        """Send what is queued (for up to ``grace_s``), then stop the sender and every task."""
        await self.sender.flush(grace_s)
        await self.stop()

    def abort_sending(self) -> None:
        """Stop writing and drop what is queued (its memory goes now, not when the socket does);
        ``stop`` then awaits the tasks."""
        self.sender.abort()

    async def stop(self) -> None:
        """Cancel and await the runner's tasks (the sender, background releases)."""
        await self._tasks.aclose()
        self.sender.clear()


__all__ = ["LEAD_FACTOR", "LEAD_MARGIN_S", "MAX_QUEUED_EVENTS", "Options", "Runner"]
