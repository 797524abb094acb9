"""``VoiceEngine``: every voice session of a server, from admission to its end.

As nano-vllm's ``LLMEngine`` owns its scheduler, the engine owns what every
transport (the WebSocket route, WebRTC calls) shares:

- the model cache (``models.VoiceModels``): a voice model is loaded once per
  process, another one on the first session that asks for it;
- admission: the model has loaded, the name is served, and there is room under
  ``--max-sessions`` (which counts live sessions only), else OpenAI's error;
- the sessions: each one's core, model stream and runner (``open_runner``),
  counted while it lives (``enlist``), and the registries of live and parked
  sessions that resuming links look sessions up in.

Each admitted session's lifecycle (open, live, parked, resumed, ended) is run
by its own owner (``owner.SessionOwner``) by the table in
``voice/lifecycle.py``; the parked budget is ``parking.ParkingBudget``, and a
resume's take-over is ``handoff``. A transport only accepts, decodes and hands
links and events to the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from livegen.errors import CapacityExceeded, ConfigError, RemoteProtocolError
from livegen.logs import bind_session, log_event
from livegen.models import Registry
from livegen.models.registry import ServedNames
from livegen.models.voice import (
    VoiceModel,
)
from livegen.protocol import errors as wire_errors
from livegen.protocol import realtime as wire
from livegen.protocol.realtime import server as ev
from livegen.protocol.realtime.fields import decode_session
from livegen.runtime.voice import handoff as handoffs
from livegen.runtime.voice.lifecycle import Handoff, Link, LiveSession, Opening
from livegen.runtime.voice.models import ModelSettings, SharedModels, VoiceModels
from livegen.runtime.voice.owner import SessionOwner
from livegen.runtime.voice.parking import ParkingBudget, open_reclaiming
from livegen.runtime.voice.runner import Dialect, Runner, RunnerLimits
from livegen.tasks import TaskSet
from livegen.voice.config import Config, apply_update
from livegen.voice.session import Limits, Session

logger = logging.getLogger("livegen.runtime.voice")


class VoiceSettings(ModelSettings, Protocol):
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


class VoiceEngine:
    def __init__(
        self,
        registry: Registry,
        names: ServedNames,
        settings: VoiceSettings,
        metrics: Any,
        limits: Limits | None = None,
        shared: SharedModels | None = None,
    ) -> None:
        """``shared``: a cluster's model services, for a server process of one (none: in-process)."""
        self.registry = registry
        #: Requested model names -> the model that answers (``--served-model-name``, ``--model-alias``).
        self.names = names
        self.default_model = names.default
        self.settings = settings
        #: The server's Prometheus metrics (``server/metrics.py``).
        self.metrics = metrics
        # The MCP hosts are the operator's (``--mcp-allowed-hosts``); settings without them allow none.
        hosts = tuple(getattr(settings, "mcp_allowed_hosts", ()))
        timeout_s = float(getattr(settings, "mcp_timeout_s", Limits.mcp_timeout_s))
        self.limits = limits or Limits(mcp_allowed_hosts=hosts, mcp_timeout_s=timeout_s)
        self.cache = VoiceModels(registry, names, settings, shared)
        #: Loaded models by registry name (the cache's own dict).
        self.models: dict[str, VoiceModel] = self.cache.loaded
        self.runners: set[Runner] = set()
        #: Sessions by id, for resuming links, and the tasks that own them.
        self.live: dict[str, LiveSession] = {}
        #: Sessions without a link, waiting for a resume, and their budget.
        self.parking = ParkingBudget(settings, metrics)
        #: The parked sessions by id, oldest first (the budget's own dict).
        self.parked: dict[str, LiveSession] = self.parking.sessions
        #: The owners' tasks (``owner.SessionOwner.run``), one per session, until it ends; ``stop``
        #: cancels and awaits those that outlive the server's stop.
        self.owners = TaskSet()
        # Labelled children looked up once: a label lookup per event was a measurable share of
        # the hot path (issue #19's profile).
        self.events_in = metrics.events.labels(kind="voice", direction="in")
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
        with contextlib.suppress(TimeoutError):  # parked sessions end with their runners: let them clean up
            async with asyncio.timeout(5.0):
                await self.owners.wait()
        await self.owners.aclose()
        await self.cache.close()

    def health(self) -> dict[str, Any]:
        report = self._health()
        if (model := self.models.get(self.default_model)) is not None:
            # The model's own health: its workers (a stuck or restarting one makes it not ready),
            # and this server's remote stages where it speaks or hears through them.
            health = model.health()
            report.update(health.detail)
            if not health.ready:
                report.update(ready=False, reason=health.reason)
        return report

    def _health(self) -> dict[str, Any]:
        return {
            "ready": self.default_model in self.models,
            "model": self.default_model,
            "sessions": len(self.runners),
            "live_sessions": len(self.runners) - len(self.parked),
            "parked_sessions": len(self.parked),
            "parked_bytes": self.parked_bytes(),
        }

    def parked_bytes(self) -> int:
        return self.parking.held_bytes()

    async def model(self, name: str) -> VoiceModel:
        """The voice model ``name`` answers to, loaded once per process."""
        return await self.cache.get(name)

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
        formats_fixed: bool = False,
    ) -> Runner:
        """The session core, its model stream and its runner, for any transport. Raises
        OpenAI's error when the model cannot open a stream. ``enlist`` starts the count.
        ``formats_fixed``: the transport carries the default formats only (a call's track)."""
        counter = itertools.count(1)
        tag = session_id[5:13]

        def ids(prefix: str) -> str:
            return f"{prefix}_{tag}{next(counter):x}"

        facts = self.cache.facts(name, model)
        canonical = self.names.canonical
        session = Session(
            session_id, facts, ids, self.limits, canonical_name=canonical, session_type=session_type
        )
        if formats_fixed:
            session.config = dataclasses.replace(session.config, formats_fixed=True)
        session.is_resumable = self.settings.resume_grace_s > 0
        try:
            config = session.config.stream_config()
            stream = await open_reclaiming(self.parking, model, name, session_id, config)
        except CapacityExceeded as exc:  # a duplex model's frame clock is full
            log_event(logger, "voice.realtime_capacity", logging.WARNING, error=exc.message)
            raise wire_errors.REALTIME_CAPACITY.error(detail=exc.message) from exc
        except Exception as exc:  # one model failing to open a stream fails this session only
            log_event(logger, "voice.open_failed", logging.ERROR, error=str(exc))
            raise wire_errors.MODEL_OPEN_FAILED.error(model=name, detail=exc) from exc
        return Runner(
            session,
            stream,
            send_text,
            limits=RunnerLimits(outbox_bytes=self.settings.max_unsent_bytes),
            on_sent=self._on_sent,
            open_model=functools.partial(self.cache.open_stream, session_id),
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

    # -- refusals outside any session ------------------------------------------------------
    async def refuse(self, link: Link, error: RemoteProtocolError, close_code: int) -> None:
        """An OpenAI-shaped error outside any session (refusals, failed resumes), then a close."""
        await self.send_error(link, error)
        await link.close(close_code)

    async def send_error(self, link: Link, error: RemoteProtocolError) -> None:
        """An OpenAI-shaped error outside any session, counted."""
        self.metrics.errors.labels(kind="voice", code=error.code).inc()
        event = ev.Error(event_id="event_refused", error=error.to_error_body())
        await link.send_text(wire.encode(event).decode())

    # -- the sessions' lifecycles ---------------------------------------------------------
    def open(self, opening: Opening) -> None:
        """Start an admitted session's owner (``owner.SessionOwner``); ``opening.handoff.released``
        is set when the owner is done with the opening link. The session is a task of the engine,
        not of the transport's handler: when the link goes, the handler returns (so a server
        shutdown never waits for a parked session) and the session waits for a resume on its own."""
        owner = SessionOwner(self, opening)
        with bind_session(opening.session_id):
            task = self.owners.spawn(owner.run(), name=f"voice-session-{opening.session_id}")
        task.add_done_callback(self._owner_done)

    @staticmethod
    def _owner_done(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None:  # a bug: this session only
            logger.error("voice.owner_failed", exc_info=exc, extra={"fields": {"error": repr(exc)}})

    async def hand_over(self, handoff: Handoff, session_id: str, resume_token: str) -> None:
        """A resuming link: claim the session's token and post the handoff to the session's
        owner (``handoff.hand_over``); return when the owner is done with the link."""
        live = self.live.get(session_id)
        await handoffs.hand_over(live, handoff, session_id, resume_token, self.send_error)

    def check_resume(self, session_id: str, resume_token: str) -> None:
        """Raise ``session_not_found``/``invalid_resume_token`` for a resume that ``post_resume``
        would refuse now; nothing is claimed (a call checks before it negotiates its media)."""
        live = self.live.get(session_id)
        if live is None or not live.credential.matches(resume_token):
            raise handoffs.refusal(live)

    def post_resume(self, handoff: Handoff, session_id: str, resume_token: str) -> None:
        """A resuming link whose transport answers before the take-over (a WebRTC call): claim
        and post at once (``handoff.post``); raises ``session_not_found``/``invalid_resume_token``."""
        handoffs.post(self.live.get(session_id), handoff, resume_token)


def configured_session(session: object, model: str, session_id: str) -> dict[str, Any]:
    """The session object ``session`` (a key's or a call's configuration) gives a session of
    ``model``, decoded and checked as a ``session.update`` of it would be (the same errors, raised
    if invalid): the transports check configurations through the engine, never the core."""
    if not isinstance(session, dict):
        raise wire_errors.INVALID_VALUE.error(detail="session must be an object", param="session")
    return apply_update(Config(model=model), decode_session(session)).to_wire(session_id)
