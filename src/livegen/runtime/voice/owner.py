"""``SessionOwner``: one voice session's lifecycle, run by the table in ``voice/lifecycle.py``.

The engine starts one owner per admitted session (``VoiceEngine.open``); the
owner's task holds the session from its opening to its end, and it alone
attaches and detaches links, so a resume never races the session ending. Its
loop is the table's: in a *waiting* state (LIVE, PARKED) it waits for what
happens from outside, in a *busy* one (OPENING, LOST, RESUMING) it runs that
state's step; either way the outcome is an ``Event``, ``transition`` gives the
next state and the actions, and the owner performs them in order. Nothing here
decides where a session goes next; this module only does what the table says.

Every task the owner starts (the runner, the link's reader, the waits, the
background close of a replaced link) is a child of its ``asyncio.TaskGroup``,
so none outlives the session and none is left to the garbage collector. The
session's work is in the modules it calls: ``inbound`` (client events to the
runner), ``handoff`` (resume take-over and closing links), ``parking`` (the
parked budget), ``engine`` (admission, the model cache, the session's parts).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from livegen.errors import RemoteProtocolError
from livegen.logs import log_event
from livegen.protocol import errors as wire_errors
from livegen.protocol.realtime import duplex
from livegen.protocol.realtime import server as ev
from livegen.protocol.realtime.beta import to_beta
from livegen.runtime.closes import CLOSE_NOT_READING
from livegen.runtime.voice import handoff as handoffs
from livegen.runtime.voice import inbound
from livegen.runtime.voice.attachment import Attachment
from livegen.runtime.voice.lifecycle import Handoff, LiveSession, Opening
from livegen.runtime.voice.runner import FAILED_CLOSE_CODE
from livegen.voice.lifecycle import Action, Event, State, transition

if TYPE_CHECKING:
    from livegen.models.voice import VoiceModel
    from livegen.runtime.voice.lifecycle import Link
    from livegen.runtime.voice.parking import ParkingBudget
    from livegen.runtime.voice.runner import Dialect, Runner

logger = logging.getLogger("livegen.runtime.voice")


class Grace(Protocol):
    @property
    def resume_grace_s(self) -> float: ...


class Engine(Protocol):
    """The voice engine as an owner uses it (``runtime/voice/engine.py``'s ``VoiceEngine``, which
    builds the owners: declared here so that the two do not import each other)."""

    @property
    def settings(self) -> Grace: ...
    @property
    def parking(self) -> ParkingBudget: ...
    @property
    def metrics(self) -> Any: ...
    @property
    def events_in(self) -> Any: ...
    @property
    def live(self) -> dict[str, LiveSession]: ...

    async def open_runner(
        self,
        session_id: str,
        name: str,
        model: VoiceModel,
        send_text: Callable[[str], Awaitable[None]],
        dialect: Dialect | None = None,
        session_type: str = "realtime",
        formats_fixed: bool = False,
    ) -> Runner: ...
    def enlist(self, runner: Runner) -> Callable[[], None]: ...
    async def refuse(self, link: Link, error: RemoteProtocolError, close_code: int) -> None: ...
    async def send_error(self, link: Link, error: RemoteProtocolError) -> None: ...


#: A client that closes with these meant to leave; any other loss parks the session for a resume.
CLEAN_CLOSE_CODES = frozenset({1000, 1001})


#: The method that runs each busy state's step or waits in each waiting state, and the method
#: that performs each action (by name: a session holds no table of its own bound methods).
_STEPS = {
    State.OPENING: "_open",
    State.LIVE: "_wait_live",
    State.LOST: "_try_park",
    State.PARKED: "_wait_parked",
    State.RESUMING: "_take_over",
}
_ACTIONS = {action: f"_{action.value}" for action in Action}


class SessionOwner:
    # One per session, alive as long as it is: no per-instance dict.
    __slots__ = (
        "_ended",
        "_reason",
        "_refusal",
        "_resuming",
        "_run",
        "_tasks",
        "_undo",
        "engine",
        "live",
        "opening",
        "state",
    )

    def __init__(self, engine: Engine, opening: Opening) -> None:
        self.engine = engine
        self.opening = opening
        self.state = State.OPENING
        #: The session, once OPENING's step has made it.
        self.live: LiveSession | None = None
        #: The link being taken over (RESUMING), and why the opening failed (OPEN_FAILED).
        self._resuming: Handoff | None = None
        self._refusal: RemoteProtocolError | None = None
        self._tasks = asyncio.TaskGroup()
        self._run: asyncio.Task[None] | None = None
        self._undo: Callable[[], None] | None = None
        self._ended = False
        #: Why the session ends when its link goes (``session.closed``'s reason): the link may say.
        self._reason = "client_disconnected"

    async def run(self) -> None:
        """Own the session from its opening to its end."""
        async with self._tasks:
            try:
                while self.state is not State.ENDED:
                    event = await getattr(self, _STEPS[self.state])()
                    after, actions = transition(self.state, event)
                    for action in actions:
                        await getattr(self, _ACTIONS[action])()
                    self.state = after
            finally:  # a bug or a cancellation: the session still ends, and its links are let go
                if self.opening.outcome is not None and not self.opening.outcome.done():
                    self.opening.outcome.cancel()
                if not self._ended:
                    await self._end()

    # -- the waiting states ----------------------------------------------------------------
    async def _wait_live(self) -> Event:
        """LIVE: until the link closes (a goodbye, or lost), the runner ends or a resume arrives."""
        live, run = self._session()
        assert live.attached is not None
        reader = self._tasks.create_task(inbound.read(live.attached.link, live, self.engine.events_in))
        handoff = self._tasks.create_task(live.handoffs.get())
        try:
            await asyncio.wait({reader, run, handoff}, return_when=asyncio.FIRST_COMPLETED)
            if handoff.done():
                self._resuming = handoff.result()
                return Event.HANDOFF
            if run.done():
                return Event.RUNNER_ENDED
            closed = reader.result()
            if isinstance(closed, Exception):
                raise closed
            self._reason = getattr(live.attached.link, "end_reason", None) or self._reason
            return Event.GOODBYE if closed in CLEAN_CLOSE_CODES else Event.LINK_LOST
        finally:
            reader.cancel()
            handoff.cancel()

    async def _wait_parked(self) -> Event:
        """PARKED: until a resume arrives, the grace period passes, the budget evicts the session
        or its runner ends."""
        live, run = self._session()
        handoff = self._tasks.create_task(live.handoffs.get())
        evicted = self._tasks.create_task(live.evicted.wait())
        grace = self.engine.settings.resume_grace_s
        try:
            done, _ = await asyncio.wait(
                {run, handoff, evicted}, timeout=grace, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            handoff.cancel()
            evicted.cancel()
        if handoff in done:
            self._resuming = handoff.result()
            return Event.HANDOFF
        outcome = "expired" if not done else "evicted" if evicted in done else "ended_parked"
        log_event(logger, f"voice.session_{outcome}")
        return Event.GRACE_EXPIRED if not done else Event.EVICTED if evicted in done else Event.RUNNER_ENDED

    # -- the busy states -------------------------------------------------------------------
    async def _open(self) -> Event:
        """OPENING: the session's runner, writing to an attachment on the opening link."""
        try:
            self.live = await self._open_live()
        except RemoteProtocolError as error:
            self._refusal = error
            return Event.OPEN_FAILED
        return Event.OPENED

    async def _open_live(self) -> LiveSession:
        opening = self.opening
        first = opening.first
        dialect = None
        if first is not None:
            dialect = duplex.DuplexDialect(hold_created=duplex.first_type(first) == "session.update")
        attachment = Attachment(opening.handoff.link.send_text, stamp_seq=dialect is not None)
        live: LiveSession | None = None

        def outgoing(event: ev.ServerEvent) -> ev.ServerEvent | None:
            if dialect is not None and (event := dialect.outbound(event)) is None:  # type: ignore[assignment]
                return None
            if isinstance(event, ev.SessionCreated) and live is not None:
                event = msgspec.structs.replace(event, resume_token=live.credential.token)
            attached = live.attached if live is not None else opening.handoff
            if attached is not None and attached.transport is not None:
                return attached.transport(event)
            return to_beta(event) if opening.beta else event

        runner = await self.engine.open_runner(
            opening.session_id,
            opening.model_name,
            opening.model,
            attachment.send,
            outgoing,
            session_type=opening.session_type,
            formats_fixed=opening.formats_fixed,
        )
        live = LiveSession(runner, attachment, duplex=dialect, attached=opening.handoff)
        kind = "duplex" if dialect is not None else "beta" if opening.beta else "ga"
        log_event(logger, "voice.session_opened", model=opening.model_name, dialect=kind)
        return live

    async def _try_park(self) -> Event:
        """LOST: whether the session may wait for a resume (the parked budget makes room)."""
        live, run = self._session()
        if run.done() or self.engine.settings.resume_grace_s <= 0:
            return Event.NO_PARK
        live.attachment.detach()
        if not self.engine.parking.make_room(live):
            log_event(logger, "voice.session_not_parked", held_bytes=live.held_bytes())
            return Event.NO_PARK
        return Event.MAY_PARK

    async def _take_over(self) -> Event:
        """RESUMING: greeting and replay on the resuming link (``handoff.take_over``)."""
        live, _ = self._session()
        assert self._resuming is not None
        taken = await handoffs.take_over(live, self._resuming, self.engine.send_error)
        return Event.RESUMED if taken else Event.RESUME_FAILED

    # -- the actions -----------------------------------------------------------------------
    async def _start(self) -> None:
        live = self.live
        assert live is not None
        runner = live.runner
        self._undo = self.engine.enlist(runner)
        self.engine.live[self.opening.session_id] = live
        # runner.run reports its own failures (``Runner._fail``) and does not raise.
        self._run = self._tasks.create_task(runner.run())
        if self.opening.bound is not None:  # the configuration the client's key was made with
            await runner.put_client(self.opening.bound)
        if self.opening.first is not None:
            await inbound.deliver(self.opening.first, live)
        self._settle(None)

    def _settle(self, refusal: RemoteProtocolError | None) -> None:
        """Tell a transport that waits for it whether the session started (``Opening.outcome``)."""
        outcome = self.opening.outcome
        if outcome is not None and not outcome.done():
            outcome.set_result(refusal)

    async def _refuse(self) -> None:
        assert self._refusal is not None
        self._settle(self._refusal)
        # A full frame clock is "try again later" (1013); anything else failed to open (1011).
        is_full = self._refusal.code == wire_errors.REALTIME_CAPACITY.code
        await self.engine.refuse(self.opening.handoff.link, self._refusal, 1013 if is_full else 1011)
        self.opening.handoff.released.set()

    async def _retire(self) -> None:
        live, _ = self._session()
        await handoffs.retire(live.attached, 1000)
        live.attached = None

    async def _replace(self) -> None:
        # Abort the old link's pending write at once (its peer may have stopped reading); it
        # closes in the background, and the resume goes on meanwhile.
        live, _ = self._session()
        attached, live.attached = live.attached, None
        live.attachment.detach()
        assert attached is not None
        self._tasks.create_task(handoffs.retire_later(attached, handoffs.REPLACED))

    async def _park(self) -> None:
        live, _ = self._session()
        self.engine.parking.park(live)
        grace = self.engine.settings.resume_grace_s
        log_event(logger, "voice.session_parked", grace_s=grace, held_bytes=live.held_bytes())

    async def _unpark(self) -> None:
        if self.live is not None:
            self.engine.parking.unpark(self.live)

    async def _attach(self) -> None:
        live, _ = self._session()
        live.attached, self._resuming = self._resuming, None

    async def _reject(self) -> None:
        await handoffs.retire(self._resuming, 1008)
        self._resuming = None

    async def _end(self) -> None:
        """Stop the runner, forget the session, close the link it ends on, let every handler go."""
        self._ended = True
        live, run = self.live, self._run
        if live is None or run is None:  # it never started: only the opening link to let go
            self.opening.handoff.released.set()
            return
        runner = live.runner
        # A resume cut short (the engine's stop cancelled its take-over): its handler may return.
        await handoffs.retire(self._resuming, 1001)
        self._resuming = None
        await runner.stop(self._reason)
        with contextlib.suppress(Exception):
            await run
        if self._undo is not None:
            self._undo()
        await self._close(live)
        self.opening.handoff.released.set()
        await handoffs.turn_away(live, self.engine.send_error)
        log_event(logger, "voice.session_closed", stale_outputs=runner.session.num_stale_outputs)

    async def _close(self, live: LiveSession) -> None:
        """Forget the session, and close the link it ends on with the code its end calls for."""
        runner = live.runner
        self.engine.live.pop(runner.session.id, None)
        self.engine.parking.unpark(live)
        is_not_reading = runner.close_reason == "outbox_overflow"
        if is_not_reading:  # the error and session.closed, written if the client reads again
            self.engine.metrics.refused.labels(code="unsent_bytes_exceeded").inc()
            for text in runner.take_unsent():
                await live.attachment.send(text)
        code = CLOSE_NOT_READING if is_not_reading else FAILED_CLOSE_CODE if runner.failed else 1000
        attached, live.attached = live.attached, None
        await handoffs.retire(attached, code)

    def _session(self) -> tuple[LiveSession, asyncio.Task[None]]:
        """The session and its runner's task, which every state after OPENING has."""
        assert self.live is not None and self._run is not None, self.state
        return self.live, self._run
