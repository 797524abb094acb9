"""The voice runner: one per session, the single writer of its session core.

The runner owns four tasks around one ``voice.Session``:

- the *runner* itself, the only task that calls into the core; it takes one
  item at a time from a bounded mailbox (client events, chain reports, model
  outputs, disconnects) or wakes for the core's pacing deadline, and carries
  out the effects the core returns (promise V1, docs/architecture.md);
- the *chain*, which runs model calls one after another in wire order; it
  skips attempts a canceller already settled, and after a failure it waits
  until the core has rolled back the rest of the chain (``ResumeChain``), so
  nothing behind a hole reaches the model (promise V3). It reports each
  outcome through the mailbox, except an append the model took: those the
  runner settles before its next item (``_settle_taken``), without a wake of
  its own per append;
- the *pump*, which forwards the model's outputs into the mailbox; the core
  drops those of an older epoch (promise V2);
- the *sender*, which writes events to the socket from a bounded outbox
  (``runtime/outbox.py``); audio that would overflow it fails that one
  response with a clear error, while control events (terminals above all)
  always have room (promise V5). The outbox is bounded in events and in bytes
  (``outbox_bytes``: events are encoded as they are queued, so the count is
  exact); a client that reads nothing past either bound gets
  ``unsent_bytes_exceeded`` and the session ends (``close_reason``
  ``outbox_overflow``).

The four tasks belong to ``run``'s ``TaskSet`` (``livegen/tasks.py``): every
one is cancelled and awaited before ``run`` returns.

Whoever feeds the runner (the WebSocket endpoint) decodes JSON before
``put_client``; the mailbox bound pushes back on a client that sends faster
than its session runs, and on that client only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from livegen.errors import RemoteProtocolError
from livegen.logs import log_event
from livegen.models.voice import McpApprovals, StreamConfig, VoiceOutput, VoiceStream
from livegen.protocol import realtime as wire
from livegen.protocol.errors import INTERNAL_ERROR, MODEL_NOT_FOUND, UNSENT_BYTES_EXCEEDED
from livegen.protocol.realtime import server as ev
from livegen.runtime.outbox import Bounds, Outbox
from livegen.runtime.voice.mailbox import Mailbox
from livegen.tasks import TaskSet
from livegen.voice.chain import (
    Attempt,
    AttemptKind,
    Closed,
    DropOutput,
    Effect,
    Outcome,
    ResumeChain,
    Run,
    Send,
    SwitchModel,
    stamped,
)
from livegen.voice.session import ModelFacts, Session

logger = logging.getLogger("livegen.runtime.voice")

#: Control events (terminals, errors) the outbox takes beyond its bound.
CONTROL_RESERVE = 64
#: How long a closing session waits for its last events to be written.
DRAIN_SECONDS = 5.0
#: The WebSocket close code of a session that failed on an internal error (RFC 6455: 1011).
FAILED_CLOSE_CODE = 1011


@dataclass(frozen=True)
class RunnerLimits:
    mailbox: int = 256
    outbox: int = 512
    #: Bytes of queued events (beyond the one being written); None: bounded in events only.
    outbox_bytes: int | None = None


@dataclass(slots=True)
class _ClientItem:
    event: wire.ClientEvent | RemoteProtocolError
    received_at: float


@dataclass(slots=True)
class _Settled:
    attempt: Attempt
    outcome: Outcome
    error: str


@dataclass(slots=True)
class _Output:
    output: VoiceOutput


@dataclass(slots=True)
class _Stop:
    reason: str


_Item = _ClientItem | _Settled | _Output | _Stop
#: An outbox entry: (response id of an audio delta or None, event, its wire text; "" held back).
_Queued = tuple[str | None, ev.ServerEvent, str]
SendText = Callable[[str], Awaitable[None]]
#: Rewrites one outgoing server event for the client's dialect (None: hold it back).
Dialect = Callable[[ev.ServerEvent], ev.ServerEvent | None]
#: Opens a stream of the named model (``session.update`` with another model); raises
#: ``RemoteProtocolError`` for a name the server does not serve.
OpenModel = Callable[[str, StreamConfig], Awaitable[tuple[ModelFacts, VoiceStream]]]


class Runner:
    def __init__(
        self,
        session: Session,
        stream: VoiceStream,
        send_text: SendText,
        *,
        limits: RunnerLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_sent: Callable[[ev.ServerEvent], None] | None = None,
        open_model: OpenModel | None = None,
        dialect: Dialect | None = None,
    ) -> None:
        self.session = session
        #: Rewrites each outgoing GA event for the client's dialect (``protocol/realtime/beta.py``,
        #: ``protocol/realtime/duplex.py``); None: the event is not sent in that dialect.
        self._dialect = dialect
        self.stream = stream
        self.limits = limits or RunnerLimits()
        self._send_text = send_text
        self._clock = clock
        self._on_sent = on_sent
        self._mailbox: Mailbox[_Item] = Mailbox(self.limits.mailbox)
        self._chain: Mailbox[Attempt] = Mailbox()
        self._chain_resumed = asyncio.Event()
        self._chain_resumed.set()
        #: Appends the model took, in chain order, not yet settled: the runner settles them
        #: before its next item, tick or stop (``_settle_taken``), not on a wake of its own.
        self._taken: list[Attempt] = []
        # One event passes whatever its size when nothing waits before it: the budget is on backlog.
        bounds = Bounds(self.limits.outbox, self.limits.outbox_bytes, lone_item_passes=True)
        self._outbox: Outbox[_Queued] = Outbox(bounds)
        #: The reason the session closed with, once it has.
        self.close_reason: str | None = None
        self._tasks = TaskSet()
        self._stop_reason: str | None = None
        self._open_model = open_model
        self._switch: SwitchModel | None = None
        self._pump_task: asyncio.Task[None] | None = None
        #: The runner ended on an unexpected exception (``_fail``), not by a close.
        self.failed = False
        self.done = asyncio.Event()

    @property
    def outbox_bytes(self) -> int:
        """Bytes of the wire text queued for the socket and not yet written."""
        return self._outbox.num_bytes

    # --- feeding ---------------------------------------------------------------------

    async def put_client(self, event: wire.ClientEvent | RemoteProtocolError) -> None:
        """A decoded client event (or its decoding error); waits while the mailbox is full."""
        item = _ClientItem(event, self._clock())
        mailbox = self._mailbox
        if mailbox.full():
            await mailbox.put(item)
        else:  # the common case: no coroutine for a hand-off that cannot wait
            mailbox.put_nowait(item)

    async def stop(self, reason: str) -> None:
        """End the session (disconnect, shutdown); its terminal event is sent if the socket lives.

        Never waits on a full mailbox: the runner also checks the request between items.
        """
        if self.done.is_set():
            return
        self._stop_reason = self._stop_reason or reason
        with contextlib.suppress(asyncio.QueueFull):
            self._mailbox.put_nowait(_Stop(reason))

    # --- the tasks -------------------------------------------------------------------

    async def run(self) -> None:
        tasks = self._tasks
        tasks.spawn(self._run_chain(), name="voice-chain")
        tasks.spawn(self._run_sender(), name="voice-sender")
        self._pump_task = tasks.spawn(self._pump(), name="voice-pump")
        try:
            try:
                self.session.open(self._clock())
                self._apply(self.session.take_effects())
                await self._run_core()
            except Exception as exc:  # a bug of ours: this session fails, loudly and once
                self._fail(exc)
            await self._drain_outbox()
        finally:
            await tasks.aclose()
            with contextlib.suppress(Exception):
                await self.stream.aclose()
            self.done.set()

    def _fail(self, exc: Exception) -> None:
        """End the session after an unexpected exception: one log line with the traceback, then
        an ``error`` (``server_error``) and ``session.closed`` for the client (the endpoint then
        closes the socket with ``FAILED_CLOSE_CODE``). Never silent, never the server's end."""
        self.failed = True
        logger.error(
            "voice.runner_failed",
            exc_info=exc,
            extra={"fields": {"error": f"{type(exc).__name__}: {exc}", "session": self.session.id}},
        )
        body = INTERNAL_ERROR.event_body()
        self._enqueue(stamped(ev.Error(error=body), self.session.ids))
        try:
            self.session.close(self._clock(), "server_error")
            effects = self.session.take_effects()
        except Exception:  # the core itself is broken: the terminal event by hand
            effects = []
        if not any(isinstance(e, Send) and isinstance(e.event, ev.SessionClosed) for e in effects):
            closed = ev.SessionClosed(session_id=self.session.id, reason="server_error")
            effects = [stamped(closed, self.session.ids)]
        for effect in effects:
            if isinstance(effect, Send):
                self._enqueue(effect)

    async def _run_core(self) -> None:
        session = self.session
        mailbox = self._mailbox
        while not session.is_closed:
            now = self._clock()
            if self._taken:
                self._settle_taken(now)
            if self._stop_reason is not None:
                session.close(now, self._stop_reason)
                self._apply(session.take_effects())
                break
            deadline = session.next_deadline()
            if deadline is not None and deadline <= now:
                session.tick(now)
                self._apply(session.take_effects())
                continue
            if mailbox.empty():
                # wait() takes no item, so waking at the deadline can never lose one.
                await mailbox.wait(None if deadline is None else deadline - now)
                continue
            # Everything already received is handled before the next wait, one item at a time (a
            # due deadline, a stop or a model switch still comes between two items); the clock
            # read for the deadline check is the item's time.
            self._handle(mailbox.get_nowait(), now)
            self._apply(session.take_effects())
            if self._switch is not None:
                await self._switch_model(self._switch)

    def _settle_taken(self, now: float) -> None:
        """Settle the appends the model took since the last item. A taken append's settlement
        has no effects (its reservation is committed) and nothing the runner does before its
        next item reads it, so the chain reports it here rather than through the mailbox: a wake
        of the runner per append cost about a tenth of an append's CPU. Each is settled as if
        its report had come just before the next item (V1: one task applies everything, in an
        order the mailbox allows too); only appends hold reservations, and they settle in chain
        order, so settling them ahead of another kind's success changes nothing; a failure's
        report, through the mailbox, finds every earlier append settled (V3)."""
        session = self.session
        taken, self._taken = self._taken, []
        for attempt in taken:
            session.settle(attempt, Outcome.OK, now)
        self._apply(session.take_effects())

    def _handle(self, item: _Item, now: float) -> None:
        session = self.session
        if isinstance(item, _ClientItem):  # the common case (appends) first
            event = item.event
            if isinstance(event, RemoteProtocolError):
                session.reject(event)
                return
            try:
                session.receive(event, item.received_at)
            except RemoteProtocolError as error:
                session.reject(error)
        elif isinstance(item, _Settled):
            session.settle(item.attempt, item.outcome, now, item.error)
        elif isinstance(item, _Output):
            session.on_output(item.output, now)
        else:
            session.close(now, item.reason)

    def _apply(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Send):
                self._enqueue(effect)
            elif isinstance(effect, Run):
                self._chain.put_nowait(effect.attempt)
            elif isinstance(effect, ResumeChain):
                self._chain_resumed.set()
            elif isinstance(effect, DropOutput):
                self._drop_audio(effect.response_id)
            elif isinstance(effect, SwitchModel):
                self._switch = effect
            elif isinstance(effect, Closed):
                self.close_reason = effect.reason  # the terminal is in the outbox; the loop ends

    def _enqueue(self, effect: Send) -> None:
        if self.close_reason is not None:
            return  # session.closed is the last event (a batch cut short by _not_reading)
        event = effect.event
        audio = event if isinstance(event, ev.OutputAudioDelta) else None
        wire_event = event if self._dialect is None else self._dialect(event)
        # A dialect may hold an event back (""): it still passes through the outbox, in order, to on_sent.
        text = "" if wire_event is None else ev.encode(wire_event).decode()
        if audio is not None:
            if self._outbox.put((audio.response_id, event, text), len(text)):
                return
            # Audio past a bound fails its response; control events still have room.
            self._drop_audio(audio.response_id)
            self.session.on_outbox_overflow(self._clock())
            self._apply(self.session.take_effects())
        elif not self._outbox.put((None, event, text), len(text), reserve=CONTROL_RESERVE):
            self._not_reading()

    def _not_reading(self) -> None:
        """A client that reads nothing: end the session rather than grow without bound."""
        log_event(
            logger,
            "voice.outbox_full",
            logging.WARNING,
            session=self.session.id,
            events=len(self._outbox),
            unsent_bytes=self.outbox_bytes,
        )
        self._outbox.clear()
        self._enqueue(stamped(ev.Error(error=UNSENT_BYTES_EXCEEDED.event_body()), self.session.ids))
        self.session.close(self._clock(), "outbox_overflow")
        self._apply(self.session.take_effects())

    def take_unsent(self) -> list[str]:
        """The wire text still queued (the sender has stopped), for a last write by the endpoint."""
        return [text for _, _, text in self._outbox.clear() if text]

    def _drop_audio(self, response_id: str) -> None:
        self._outbox.drop(lambda queued: queued[0] == response_id)

    async def _run_sender(self) -> None:
        while True:  # the outbox is never closed: the task ends when ``run`` cancels it
            with contextlib.suppress(Exception):  # the socket is gone: the runner learns it from the reader
                await self._outbox.send_all(self._write)

    async def _write(self, queued: _Queued) -> None:
        _, event, text = queued
        if text:
            await self._send_text(text)
        if self._on_sent is not None:
            self._on_sent(event)

    async def _drain_outbox(self) -> None:
        """Let the sender write the terminal event before the socket closes."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(DRAIN_SECONDS):
                await self._outbox.drained()

    async def _switch_model(self, switch: SwitchModel) -> None:
        """Replace the stream; the session waits (nothing has reached the old model yet)."""
        self._switch = None
        try:
            if self._open_model is None:
                raise MODEL_NOT_FOUND.error(model=switch.name, param="session.model")
            facts, stream = await self._open_model(switch.name, switch.config)
        except RemoteProtocolError as error:
            self.session.model_switch_failed(error)
            self._apply(self.session.take_effects())
            return
        old, old_pump = self.stream, self._pump_task
        self.stream = stream
        if old_pump is not None:
            old_pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await old_pump
        with contextlib.suppress(Exception):
            await old.aclose()
        self._pump_task = self._tasks.spawn(self._pump(), name="voice-pump")
        self.session.model_switched(facts, self._clock())
        self._apply(self.session.take_effects())

    async def _run_chain(self) -> None:
        chain = self._chain
        while True:
            if chain.empty():  # waited for here, not in a get() coroutine: one frame less per append
                await chain.wait(None)
            attempt = chain.get_nowait()
            if not attempt.is_live:
                continue  # settled by a canceller, which owns its terminal event
            if not self._chain_resumed.is_set():  # no coroutine for the common case, per append
                await self._chain_resumed.wait()
                if not attempt.is_live:
                    continue
            try:
                if attempt.kind is AttemptKind.APPEND:  # the common case, without _call's frame
                    await self.stream.append(attempt.epoch, attempt.pcm)
                else:
                    await _call(self.stream, attempt)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._chain_resumed.clear()
                settled = _Settled(attempt, Outcome.FAILED, f"{type(exc).__name__}: {exc}")
            else:
                if attempt.kind is AttemptKind.APPEND:
                    self._taken.append(attempt)  # settled with the runner's next item
                    continue
                settled = _Settled(attempt, Outcome.OK, "")
            if self._mailbox.full():
                await self._mailbox.put(settled)
            else:  # the common case, inline: no coroutine per settled append
                self._mailbox.put_nowait(settled)

    async def _pump(self) -> None:
        try:
            async for output in self.stream.outputs():
                await self._mailbox.put(_Output(output))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log_event(logger, "voice.model_outputs_failed", logging.ERROR, error=str(exc))
            await self.stop("model_failed")
        else:  # the model ended the stream on its own: nothing more will answer this session, and
            # what it said before it ended (its last error) reaches the session first, in order
            await self._mailbox.put(_Stop("model_stream_ended"))


async def _call(stream: VoiceStream, attempt: Attempt) -> None:
    kind = attempt.kind
    if kind is AttemptKind.APPEND:
        await stream.append(attempt.epoch, attempt.pcm)
    elif kind is AttemptKind.COMMIT:
        assert attempt.item_id is not None
        await stream.commit(attempt.epoch, attempt.item_id)
    elif kind is AttemptKind.CLEAR:
        await stream.clear(attempt.epoch)
    elif kind is AttemptKind.RESPOND:
        assert attempt.request is not None
        await stream.respond(attempt.epoch, attempt.request)
    elif kind is AttemptKind.CANCEL:
        await stream.cancel(attempt.epoch)
    elif kind is AttemptKind.UPDATE:
        assert attempt.config is not None
        await stream.update(attempt.config)
    elif kind is AttemptKind.APPROVE and isinstance(stream, McpApprovals):
        assert attempt.item_id is not None
        await stream.approve(attempt.epoch, attempt.item_id, attempt.approve)
