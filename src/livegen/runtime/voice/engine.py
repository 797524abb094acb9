"""``VoiceEngine``: every voice session of a server, from admission to its end.

As nano-vllm's ``LLMEngine`` owns its scheduler, the engine owns what every
transport (the WebSocket route, WebRTC calls) shares:

- the model cache: a voice model is loaded once per process (``--llm-base-url``
  configures it through the ``RemoteLLM`` contract), another one on the first
  session that asks for it;
- admission: the model has loaded, the name is served, and there is room under
  ``--max-sessions`` (which counts live sessions only), else OpenAI's error;
- the sessions: each one's core, model stream and runner (``open_runner``),
  counted while it lives (``enlist``);
- resume, as one lifecycle per session (``serve``): *attached* to a link,
  *parked* when the link is lost, then *attached* to a resuming link or
  *ended*. Parked sessions have their own budget (``--max-parked-sessions``,
  and ``--max-parked-bytes`` of journal and history), apart from
  ``--max-sessions``, so that dropped clients never lock new ones out; parking
  past it ends the oldest parked sessions first.

The task that opened a session owns it to the end: it alone attaches and
detaches links, so there is no race between a resume and the session ending.
A resuming link only claims the token and posts a ``Handoff`` to the owner
(``hand_over``); the owner takes it whether its old link is gone (the usual
case) or still looks open (half-open: the old one is closed, the new one wins).
A transport only accepts, decodes and hands links and events to the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import msgspec

from livegen.errors import ConfigError, RemoteProtocolError
from livegen.logs import bind_session, log_event
from livegen.models import Kind, Registry
from livegen.models.registry import ServedNames
from livegen.models.voice import LLMLimits, RemoteLLM, StreamConfig, VoiceModel, VoiceStream
from livegen.protocol import duplex
from livegen.protocol import errors as wire_errors
from livegen.protocol import realtime as wire
from livegen.protocol.realtime import server as ev
from livegen.protocol.realtime.beta import to_beta
from livegen.runtime.closes import CLOSE_NOT_READING
from livegen.runtime.voice.attachment import Attachment, JournalGap, new_token
from livegen.runtime.voice.lifecycle import Handoff, Link, LiveSession, Opening, resumed_event
from livegen.runtime.voice.runner import FAILED_CLOSE_CODE, Dialect, Runner, RunnerLimits
from livegen.voice.session import Limits, ModelFacts, Session

logger = logging.getLogger("livegen.runtime.voice")

#: Close code for a link whose session was resumed on another connection.
REPLACED = 4001
#: A client that closes with these meant to leave; any other loss parks the session for a resume.
CLEAN_CLOSE_CODES = frozenset({1000, 1001})
#: How long a replaced link may take to close (its peer may not be reading) before we let go.
RETIRE_TIMEOUT_S = 5.0


class VoiceSettings(Protocol):
    """The server options the engine reads (``server.config.ServerConfig`` has them all)."""

    @property
    def max_sessions(self) -> int: ...
    @property
    def max_unsent_bytes(self) -> int: ...
    @property
    def resume_grace_s(self) -> float: ...
    @property
    def max_parked_sessions(self) -> int: ...
    @property
    def max_parked_bytes(self) -> int: ...
    @property
    def llm_base_url(self) -> str | None: ...
    @property
    def llm_model(self) -> str | None: ...
    @property
    def llm_context_tokens(self) -> int | None: ...
    def llm_limits(self) -> LLMLimits: ...


class VoiceEngine:
    def __init__(
        self,
        registry: Registry,
        names: ServedNames,
        settings: VoiceSettings,
        metrics: Any,
        limits: Limits | None = None,
    ) -> None:
        self.registry = registry
        #: Requested model names -> the model that answers (``--served-model-name``, ``--model-alias``).
        self.names = names
        self.default_model = names.default
        self.settings = settings
        #: The server's Prometheus metrics (``server/metrics.py``).
        self.metrics = metrics
        self.limits = limits or Limits()
        self.models: dict[str, VoiceModel] = {}
        self.runners: set[Runner] = set()
        #: Sessions by id, for resuming links, and the tasks that own them.
        self.live: dict[str, LiveSession] = {}
        #: Sessions without a link, waiting for a resume, oldest first.
        self.parked: dict[str, LiveSession] = {}
        self.owners: set[asyncio.Task[None]] = set()
        self._load_lock = asyncio.Lock()
        # Labelled children looked up once: a label lookup per event was a measurable share of
        # the hot path (issue #19's profile).
        self._events_in = metrics.events.labels(kind="voice", direction="in")
        self._events_out = metrics.events.labels(kind="voice", direction="out")
        self._errors_by_code: dict[str, Any] = {}

    # -- the engine ------------------------------------------------------------------------
    async def start(self) -> None:
        await self.model(self.default_model)

    async def stop(self) -> None:
        for runner in list(self.runners):
            await runner.stop("server_shutdown")
        for runner in list(self.runners):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5.0):
                    await runner.done.wait()
        if self.owners:  # parked sessions end with their runners; let them clean up
            await asyncio.wait(set(self.owners), timeout=5.0)

    def health(self) -> dict[str, Any]:
        return {
            "ready": self.default_model in self.models,
            "model": self.default_model,
            "sessions": len(self.runners),
            "live_sessions": len(self.runners) - len(self.parked),
            "parked_sessions": len(self.parked),
            "parked_bytes": self.parked_bytes(),
        }

    def parked_bytes(self) -> int:
        return sum(live.held_bytes() for live in self.parked.values())

    async def model(self, name: str) -> VoiceModel:
        """The voice model ``name`` answers to, loaded once per process."""
        entry = self.registry.get(self.names.resolve(name))
        if entry.kind is not Kind.VOICE:
            raise ConfigError(f"model {name!r} is a {entry.kind} model, not a voice model")
        if entry.name not in self.models:
            async with self._load_lock:
                if entry.name not in self.models:
                    model = await asyncio.to_thread(self.registry.load, entry.name)
                    settings = self.settings
                    if settings.llm_base_url and isinstance(model, RemoteLLM):
                        model.use_llm(
                            settings.llm_base_url,
                            settings.llm_model,
                            context_tokens=settings.llm_context_tokens,
                            limits=settings.llm_limits(),
                        )
                    self.models[entry.name] = model
        return self.models[entry.name]

    # -- admission and the session's parts -------------------------------------------------
    async def admit(self, requested: str) -> tuple[str, VoiceModel]:
        """Whether a new session may open, for any transport: the model has loaded, ``requested``
        is served, and there is room under ``--max-sessions``; raises OpenAI's error if not."""
        if self.default_model not in self.models:
            raise wire_errors.MODEL_NOT_READY.error()
        try:
            name = self.names.canonical(requested)
            model = await self.model(name)
        except ConfigError:
            log_event(logger, "voice.model_not_found", logging.WARNING, requested=requested)
            raise wire_errors.MODEL_NOT_FOUND.error(model=requested) from None
        if len(self.runners) - len(self.parked) >= self.settings.max_sessions:
            raise wire_errors.TOO_MANY_SESSIONS.error(limit=self.settings.max_sessions)
        return name, model

    async def open_runner(
        self,
        session_id: str,
        name: str,
        model: VoiceModel,
        send_text: Callable[[str], Awaitable[None]],
        dialect: Dialect | None = None,
        session_type: str = "realtime",
    ) -> Runner:
        """The session core, its model stream and its runner, for any transport. Raises
        OpenAI's error when the model cannot open a stream. ``enlist`` starts the count."""
        counter = itertools.count(1)
        tag = session_id[5:13]

        def ids(prefix: str) -> str:
            return f"{prefix}_{tag}{next(counter):x}"

        facts = ModelFacts(name, model.input_rate, model.output_rate, model.has_vad)
        canonical = self.names.canonical
        session = Session(
            session_id, facts, ids, self.limits, canonical_name=canonical, session_type=session_type
        )
        try:
            stream = await model.open(session_id, session.config.stream_config())
        except Exception as exc:  # one model failing to open a stream fails this session only
            log_event(logger, "voice.open_failed", logging.ERROR, error=str(exc))
            raise wire_errors.MODEL_OPEN_FAILED.error(model=name, detail=exc) from exc
        return Runner(
            session,
            stream,
            send_text,
            limits=RunnerLimits(outbox_bytes=self.settings.max_unsent_bytes),
            on_sent=self._on_sent,
            open_model=functools.partial(self._open_model, session_id),
            dialect=dialect,
        )

    def enlist(self, runner: Runner) -> Callable[[], None]:
        """Count a runner's session as live (``--max-sessions``, metrics); returns the undo."""
        metrics = self.metrics
        self.runners.add(runner)
        metrics.sessions_open.labels(kind="voice").inc()
        metrics.sessions_total.labels(kind="voice").inc()

        def unsent_bytes() -> int:
            return runner.outbox_bytes

        metrics.unsent_sources.add(unsent_bytes)

        def undo() -> None:
            self.runners.discard(runner)
            metrics.sessions_open.labels(kind="voice").dec()
            metrics.unsent_sources.discard(unsent_bytes)

        return undo

    def _on_sent(self, event: ev.ServerEvent) -> None:
        self._events_out.inc()
        if isinstance(event, ev.Error):
            code = str(event.error.get("code"))
            if (errors := self._errors_by_code.get(code)) is None:
                errors = self._errors_by_code[code] = self.metrics.errors.labels(kind="voice", code=code)
            errors.inc()

    async def _open_model(
        self, session_id: str, name: str, config: StreamConfig
    ) -> tuple[ModelFacts, VoiceStream]:
        """Another model's stream for a session (``session.update`` with a new model)."""
        try:
            model = await self.model(name)
        except ConfigError:
            raise wire_errors.MODEL_NOT_FOUND.error(model=name, param="session.model") from None
        try:
            stream = await model.open(session_id, config)
        except Exception as exc:
            failed = wire_errors.MODEL_OPEN_FAILED
            raise failed.error(model=name, detail=exc, param="session.model") from exc
        return ModelFacts(name, model.input_rate, model.output_rate, model.has_vad), stream

    # -- refusals outside any session ------------------------------------------------------
    async def refuse(self, link: Link, error: RemoteProtocolError, close_code: int) -> None:
        """An OpenAI-shaped error outside any session (refusals, failed resumes), then a close."""
        await self.send_error(link, error)
        await link.close(close_code)

    async def send_error(self, link: Link, error: RemoteProtocolError) -> None:
        """An OpenAI-shaped error outside any session, counted."""
        self.metrics.errors.labels(kind="voice", code=error.code).inc()
        event = {"type": "error", "event_id": "event_refused", "error": error.to_error_body()}
        await link.send_text(wire.encode(event).decode())

    # -- the lifecycle: open, attached -> parked -> attached or ended ----------------------
    def open(self, opening: Opening) -> None:
        """Start an admitted session's owner task; ``opening.handoff.released`` is set when the
        owner is done with the opening link. The session is a task of the engine, not of the
        transport's handler: when the link goes, the handler returns (so a server shutdown never
        waits for a parked session) and the session waits for a resume on its own."""
        with bind_session(opening.session_id):
            owner = asyncio.create_task(self.serve(opening))
        self.owners.add(owner)
        owner.add_done_callback(self.owners.discard)

    async def serve(self, opening: Opening) -> None:
        """Own one session from its opening to its end."""
        released = opening.handoff.released
        try:
            live = await self._open_live(opening)
        except RemoteProtocolError as error:
            await self.refuse(opening.handoff.link, error, 1011)
            released.set()
            return
        runner = live.runner
        undo = self.enlist(runner)
        self.live[opening.session_id] = live
        run = asyncio.create_task(runner.run())
        if opening.bound is not None:
            await runner.put_client(opening.bound)  # the configuration the client's key was made with
        if opening.first is not None:
            await self.deliver(opening.first, live)
        try:
            await self._attached_until_ended(live, run)
        finally:
            await runner.stop("client_disconnected")
            with contextlib.suppress(Exception):
                await run
            undo()
            await self._end(live)
            released.set()
            await self._turn_away(live)
            log_event(logger, "voice.session_closed", stale_outputs=runner.session.num_stale_outputs)

    async def _open_live(self, opening: Opening) -> LiveSession:
        """The session's runner, writing to an attachment on the opening link in its dialect."""
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
            return to_beta(event) if opening.beta else event

        runner = await self.open_runner(
            opening.session_id,
            opening.model_name,
            opening.model,
            attachment.send,
            outgoing,
            session_type=opening.session_type,
        )
        live = LiveSession(runner, attachment, duplex=dialect, attached=opening.handoff)
        kind = "duplex" if dialect is not None else "beta" if opening.beta else "ga"
        log_event(logger, "voice.session_opened", model=opening.model_name, dialect=kind)
        return live

    async def _attached_until_ended(self, live: LiveSession, run: asyncio.Task[None]) -> None:
        """attached -> parked -> attached ... until the session ends (``live.attached`` is the
        link it ends on, or None when it ended parked)."""
        while True:
            if (attached := live.attached) is not None:
                outcome = await self._attached(attached.link, live, run)
                if outcome is None:
                    return
                if not isinstance(outcome, Handoff):  # the link was lost: park
                    await self._retire(attached, 1000)
                    live.attached = None
                    continue
                # Abort the old link's pending write at once (its peer may have stopped reading);
                # it closes in the background, and the resume goes on meanwhile.
                live.attached = None
                live.attachment.detach()
                self._retire_later(attached, REPLACED)
                handoff = outcome
            elif (parked := await self._park(live, run)) is not None:
                handoff = parked
            else:
                return
            if await self._take(live, handoff):
                live.attached = handoff
            else:
                await self._retire(handoff, 1008)

    async def _attached(
        self, link: Link, live: LiveSession, run: asyncio.Task[None]
    ) -> Handoff | bool | None:
        """Serve ``link`` until the session ends (None), the link is lost (False) or a resume
        takes the session over (the handoff)."""
        reader = asyncio.create_task(self._read(link, live))
        handoff = asyncio.create_task(live.handoffs.get())
        try:
            await asyncio.wait({reader, run, handoff}, return_when=asyncio.FIRST_COMPLETED)
            if handoff.done():
                return handoff.result()
            if run.done() or reader.result() in CLEAN_CLOSE_CODES:
                return None  # over, or the client said goodbye: nothing to resume
            return False
        finally:
            reader.cancel()
            handoff.cancel()

    async def _park(self, live: LiveSession, run: asyncio.Task[None]) -> Handoff | None:
        """No link: wait up to the grace period for a resume (None: the session ends)."""
        grace = self.settings.resume_grace_s
        if run.done() or grace <= 0:
            return None
        live.attachment.detach()
        if not self._make_room(live):
            log_event(logger, "voice.session_not_parked", held_bytes=live.held_bytes())
            return None
        session_id = live.runner.session.id
        self.parked[session_id] = live
        self._gauge_parked()
        log_event(logger, "voice.session_parked", grace_s=grace, held_bytes=live.held_bytes())
        handoff = asyncio.create_task(live.handoffs.get())
        evicted = asyncio.create_task(live.evicted.wait())
        try:
            done, _ = await asyncio.wait(
                {run, handoff, evicted}, timeout=grace, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            handoff.cancel()
            evicted.cancel()
            self.parked.pop(session_id, None)
            self._gauge_parked()
        if handoff in done:
            return handoff.result()
        outcome = "expired" if not done else "evicted" if evicted in done else "ended_parked"
        log_event(logger, f"voice.session_{outcome}")
        return None

    def _make_room(self, live: LiveSession) -> bool:
        """Whether ``live`` may park: the oldest parked sessions are ended until it fits in the
        parked budget (count and bytes); one bigger than the whole byte budget does not park."""
        settings = self.settings
        size = live.held_bytes()
        if settings.max_parked_sessions <= 0 or size > settings.max_parked_bytes:
            return False
        total = self.parked_bytes()
        for oldest in list(self.parked.values()):
            if len(self.parked) < settings.max_parked_sessions and total + size <= settings.max_parked_bytes:
                break
            total -= oldest.held_bytes()
            del self.parked[oldest.runner.session.id]
            oldest.evicted.set()
        return True

    def _gauge_parked(self) -> None:
        self.metrics.sessions_parked.labels(kind="voice").set(len(self.parked))
        self.metrics.parked_bytes.labels(kind="voice").set(self.parked_bytes())

    async def hand_over(self, handoff: Handoff, session_id: str, resume_token: str) -> None:
        """A resuming link: claim the session's token (single use: a second resume with it is
        refused) and post the handoff to the session's owner; return when the owner is done
        with the link."""
        live = self.live.get(session_id)
        if live is None or not live.credential.claim(resume_token):
            error = wire_errors.SESSION_NOT_FOUND if live is None else wire_errors.INVALID_RESUME_TOKEN
            error = duplex.RESUME_ERRORS[error.code] if handoff.duplex else error
            await self.refuse(handoff.link, error.error(detail="no live session with that id"), 1008)
            return
        await live.handoffs.put(handoff)
        with bind_session(session_id):
            await handoff.released.wait()

    async def _take(self, live: LiveSession, handoff: Handoff) -> bool:
        """Attach the resuming link: greeting, replay, live. A refused replay (a gap in the
        journal, a seq never sent) is an error on the new link; the session stays parked."""
        live.attachment.detach()
        session_id = live.runner.session.id
        token = new_token()
        if handoff.duplex:
            session = live.runner.session.config.to_wire(session_id)
            resumed = {"type": "session.resumed", "session_id": session_id, "session": session}
            greeting = wire.encode({**resumed, "resume_token": token}).decode()
        else:
            greeting = resumed_event(session_id, token, handoff.last_seq, live.attachment.seq)
        try:
            replayed = await live.attachment.attach(handoff.link.send_text, handoff.last_seq, greeting)
        except (JournalGap, ValueError) as exc:
            live.credential.give_back()
            with contextlib.suppress(Exception):
                await self._refuse_replay(handoff, exc, session_id)
            return False
        except Exception:  # the new link died during the replay: parked again, events kept
            live.attachment.detach()
            live.credential.give_back()
            return False
        live.credential.settle(token)
        log_event(logger, "voice.session_resumed", last_seq=handoff.last_seq, replayed=replayed)
        return True

    async def _refuse_replay(self, handoff: Handoff, exc: Exception, session_id: str) -> None:
        if handoff.duplex and isinstance(exc, JournalGap):
            await handoff.link.send_text(wire.encode(duplex.resync_required(session_id)).decode())
            return
        if handoff.duplex:  # a seq never sent: the gap went to resync_required above
            error = wire_errors.SESSION_RESUME_CONFLICT.error(detail=exc, event_id=handoff.event_id)
        else:
            kind = wire_errors.RESUME_GAP if isinstance(exc, JournalGap) else wire_errors.INVALID_VALUE
            error = kind.error(detail=exc, param="last_event_seq", event_id=handoff.event_id)
        await self.send_error(handoff.link, error)

    async def _end(self, live: LiveSession) -> None:
        """The session is over: forget it, and close the link it ends on."""
        runner = live.runner
        session_id = runner.session.id
        self.live.pop(session_id, None)
        self.parked.pop(session_id, None)
        self._gauge_parked()
        is_not_reading = runner.close_reason == "outbox_overflow"
        if is_not_reading:  # the error and session.closed, written if the client reads again
            self.metrics.refused.labels(code="unsent_bytes_exceeded").inc()
            for text in runner.take_unsent():
                await live.attachment.send(text)
        code = CLOSE_NOT_READING if is_not_reading else FAILED_CLOSE_CODE if runner.failed else 1000
        attached, live.attached = live.attached, None
        await self._retire(attached, code)

    def _retire_later(self, handoff: Handoff, code: int) -> None:
        """Close a replaced link without waiting for it (bounded: its peer may never read)."""

        async def retire() -> None:
            try:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(RETIRE_TIMEOUT_S):
                        await handoff.link.close(code)
            finally:
                handoff.released.set()

        task = asyncio.create_task(retire())
        self.owners.add(task)
        task.add_done_callback(self.owners.discard)

    async def _retire(self, handoff: Handoff | None, code: int) -> None:
        """Close a link the session no longer uses, and let its handler return."""
        if handoff is None:
            return
        with contextlib.suppress(Exception):
            await handoff.link.close(code)
        handoff.released.set()

    async def _turn_away(self, live: LiveSession) -> None:
        """Resumes that arrived as the session ended: tell them, and let their handlers return."""
        while not live.handoffs.empty():
            handoff = live.handoffs.get_nowait()
            ended = wire_errors.SESSION_NOT_FOUND.error(detail="the session has ended")
            await self.refuse(handoff.link, ended, 1008)
            handoff.released.set()

    # -- client events ---------------------------------------------------------------------
    async def _read(self, link: Link, live: LiveSession) -> int:
        """Pass the link's client events to the runner until it closes; returns its close code."""
        events_in = self._events_in
        while True:
            message = await link.receive()
            if isinstance(message, int):
                return message
            events_in.inc()
            if isinstance(message, RemoteProtocolError):
                await live.runner.put_client(message)
            else:
                await self.deliver(message, live)

    async def deliver(self, text: str, live: LiveSession) -> None:
        """One client text message to the runner, through the session's dialect."""
        runner = live.runner
        try:
            if live.duplex is None:
                await runner.put_client(wire.decode(text))
                return
            inbound = live.duplex.inbound(text)
        except RemoteProtocolError as error:
            await runner.put_client(error)
            return
        if isinstance(inbound, duplex.EventAck):
            try:
                live.attachment.acknowledge(inbound.seq)
            except ValueError as exc:
                refusal = wire_errors.INVALID_EVENT_ACK.error(detail=str(exc), event_id=inbound.event_id)
                await runner.put_client(refusal)
        elif isinstance(inbound, list):
            for event in inbound:
                await runner.put_client(event)
