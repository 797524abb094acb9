"""``WorldEngine``: the world model and every world session of a server.

As nano-vllm's ``LLMEngine`` owns its scheduler, the engine owns the model
(loaded in ``start``: in this process, or by the workers it is handed,
``WorldSettings.workers``: ``--world-workers`` Ray actors with their KV pools,
or, in a cluster of server processes, the cluster's shared world services,
loaded once for every process; ``cluster/services.py`` chose), the scheduler
that batches due sessions into one model step, and the session manager (ids,
``--max-sessions``, tombstones). It opens a session's runner from its first
``session.update``, reconfigures it from later ones, describes it for
``session.created``/``session.updated``, and reports readiness: not ready
until the model is loaded, nor while the KV pool or the realtime capacity is
full. It serves each player's link (``serve``: a ``SessionOwner``,
``owner.py``, decodes its client's messages and hands them here or to the
session's runner), each spectator's (``spectate``) and each player's who joins
another's session (``join``, ``players.py``), and ends them all on
``stop``; the transports (``server/world/service.py``, ``server/webrtc/world_calls.py``) only
move text and bytes. ``WorldSettings.of`` reads the server's options.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import msgspec

from livegen.errors import InvalidRequest, InvalidState, RemoteProtocolError
from livegen.logs import log_event
from livegen.models import ModelInfo, Registry
from livegen.models.world import WorldModel
from livegen.protocol import world as wire
from livegen.runtime.world.calibrate import calibrate
from livegen.runtime.world.owner import Link, SessionOwner
from livegen.runtime.world.players import PlayerLimits, Players
from livegen.runtime.world.recording import Recordings, RecordingSettings
from livegen.runtime.world.runner import Runner
from livegen.runtime.world.scheduler import DEFAULT_KV_BUDGET_BYTES, Scheduler
from livegen.runtime.world.spectators import SpectatorLimits, Spectators
from livegen.runtime.world.updates import check_fixed, options_of
from livegen.runtime.world.workers import WorkerSource
from livegen.world import AcceptStatus, ControlInput, Event, Manager, thaw
from livegen.world.images import decode_seed_image

logger = logging.getLogger("livegen.world")
DEFAULT_MAX_PENDING_EVENTS = 64


@dataclasses.dataclass(frozen=True)
class WorldSettings:
    """The server options the engine reads: ``server.config.ServerConfig`` gives them, and states
    their defaults (once, there)."""

    max_sessions: int
    max_unsent_bytes: int
    realtime_headroom: float
    #: Ray actors running the model (``--world-workers``); 0: the model runs in this process.
    world_workers: int = 0
    ray_address: str | None = None
    #: Keyword options for the model's loader (a weights path, a device).
    model_options: Mapping[str, str | int] = dataclasses.field(default_factory=dict)
    #: ``--world-recordings`` and its retention; None: sessions may not ask to be recorded.
    recordings: RecordingSettings | None = None
    #: Spectator bounds; None: no spectators (``session.spectate_token`` is refused).
    spectators: SpectatorLimits | None = None
    #: The transports a session may use (``session.capabilities``): WebRTC where calls are served.
    transports: tuple[wire.Transport, ...] = ("websocket",)
    #: Where the model runs outside this process, chosen once (``cluster/services.py``): the
    #: ``--world-workers`` Ray actors, or a cluster's shared world services (``--workers``,
    #: ``--ray-address``: ``max(1, world_workers)`` of them); None: in this process.
    workers: WorkerSource | None = None

    @classmethod
    def of(
        cls,
        config: WorldConfig,
        recordings: RecordingSettings | None,
        *,
        webrtc: bool,
        workers: WorkerSource | None = None,
    ) -> WorldSettings:
        """The settings the server's options (``ServerConfig``) give; ``webrtc``: calls are served;
        ``workers``: where the model runs, when not here (``cluster/services.py`` chose)."""
        return cls(
            max_sessions=config.max_sessions,
            max_unsent_bytes=config.max_unsent_bytes,
            world_workers=config.world_workers,
            ray_address=config.ray_address,
            realtime_headroom=config.world_realtime_headroom,
            model_options=config.world_options(),
            recordings=recordings,
            spectators=SpectatorLimits(
                per_session=config.world_max_spectators_per_session,
                total=config.world_max_spectators,
                token_ttl_s=config.world_spectate_token_ttl_s,
                max_unsent_bytes=config.max_unsent_bytes,
            ),
            transports=("websocket", "webrtc") if webrtc else ("websocket",),
            workers=workers,
        )


class WorldConfig(Protocol):
    """The server options ``WorldSettings.of`` reads (``server.config.ServerConfig`` has them all)."""

    @property
    def max_sessions(self) -> int: ...
    @property
    def max_unsent_bytes(self) -> int: ...
    @property
    def world_workers(self) -> int: ...
    @property
    def ray_address(self) -> str | None: ...
    @property
    def world_realtime_headroom(self) -> float: ...
    @property
    def world_max_spectators_per_session(self) -> int: ...
    @property
    def world_max_spectators(self) -> int: ...
    @property
    def world_spectate_token_ttl_s(self) -> float: ...
    def world_options(self) -> Mapping[str, str | int]: ...


class WorldEngine:
    def __init__(self, registry: Registry, entry: ModelInfo, settings: WorldSettings) -> None:
        self.registry = registry
        self.entry = entry
        self.settings = settings
        self.model: WorldModel | None = None
        self.scheduler: Scheduler | None = None
        self.manager: Manager | None = None
        #: The recordings directory (``recording.py``), or None when recordings are off.
        self.recordings = Recordings(settings.recordings) if settings.recordings is not None else None
        self.spectators = Spectators(settings.spectators) if settings.spectators is not None else None
        #: Players who join another's session (``players.py``); their tokens last as spectators'.
        ttl = settings.spectators.token_ttl_s if settings.spectators is not None else 600.0
        self.players = Players(PlayerLimits(ttl, settings.max_unsent_bytes))
        #: Every player's session owner (``owner.py``), one per link, until its link closes.
        self.owners: set[SessionOwner] = set()

    # -- the engine ------------------------------------------------------------------------
    async def start(self) -> None:
        settings = self.settings
        headroom = settings.realtime_headroom
        model: WorldModel | None = None
        if settings.workers is not None:
            options = dict(settings.model_options)
            workers = await settings.workers.start(self.entry, options, DEFAULT_KV_BUDGET_BYTES)
            scheduler = Scheduler(workers=workers, realtime_headroom=headroom)
        else:
            options = dict(settings.model_options)
            model = await asyncio.to_thread(self.registry.load, self.entry.name, options)
            scheduler = Scheduler(model, realtime_headroom=headroom)
        await scheduler.start()
        if headroom > 0:  # admission reads what batches cost: measure them before the first session
            await calibrate(scheduler)
        self.manager = Manager(
            tracks=scheduler.spec.controls,
            players=scheduler.spec.players,
            new_id=lambda: uuid.uuid4().hex[:12],
            max_sessions=settings.max_sessions,
        )
        self.model, self.scheduler = model, scheduler

    async def stop(self) -> None:
        """End every session (what is queued is sent first, each link closed), then the model."""
        for owner in list(self.owners):
            await owner.shutdown()
        if self.scheduler is not None:
            await self.scheduler.stop()
        if self.settings.workers is not None:
            await self.settings.workers.close()

    def health(self) -> dict[str, Any]:
        report: dict[str, Any] = {"ready": False, "model": self.entry.name}
        if self.scheduler is None or self.manager is None:
            report["reason"] = "model loading"
            return report
        report.update(ready=True, sessions=len(self.manager), tombstones=len(self.manager.tombstones))
        workers = self.scheduler.workers
        workers.refresh()  # a cluster's shared services: their counts, for the next check
        if len(workers.workers) > 1:
            report["workers"] = [worker.name for worker in workers.workers]
        if lost := workers.lost_workers:
            report["workers_lost"] = lost
        if (usage := workers.kv_usage()) is not None:
            report["kv"] = {"sessions": usage[0], "capacity": usage[1]}
            if workers.is_shared:  # every process's sessions, as the cluster's services last said
                report["kv"]["shared"] = [worker.name for worker in workers.workers]
        scheduler = self.scheduler
        if scheduler.admission.costs.is_measured:
            report["realtime"] = scheduler.admission.capacity()
        if workers.is_full:
            is_running = len(lost) < len(workers.workers)
            report.update(ready=False, reason="KV pool full" if is_running else "no world worker is running")
        elif scheduler.admission.is_realtime_full:
            report.update(ready=False, reason="realtime capacity full")
        return report

    def model_names(self) -> set[str]:
        return {self.entry.name, *self.entry.aliases}

    def wake(self) -> None:
        """Something changed that the scheduler should see now (an event, new options)."""
        if self.scheduler is not None:
            self.scheduler.wake()

    # -- links ------------------------------------------------------------------------------
    async def serve(self, link: Link, metrics: Any) -> None:
        """One player's link, from its first message to its close (``owner.SessionOwner``);
        ``metrics`` are the server's Prometheus metrics (``server/metrics.py``)."""
        owner = SessionOwner(self, link, metrics)
        self.owners.add(owner)
        try:
            await owner.run()
        finally:
            self.owners.discard(owner)

    async def spectate(self, session_id: str, token: str, link: Link) -> None:
        """One spectator's link (``spectators.py``): read-only, from its admission to its close."""
        assert self.spectators is not None, "a server that takes spectators gives their limits"
        await self.spectators.serve(session_id, token, link, self.describe)

    async def join(self, session_id: str, token: str, link: Link) -> None:
        """One joining player's link (``players.py``): it steers its own tracks of the session."""
        await self.players.serve(session_id, token, link, self.accept_as, self.describe)

    # -- sessions --------------------------------------------------------------------------
    def check_model(self, update: wire.SessionConfig) -> None:
        """Refuse a ``session.update`` naming another model than the one served here."""
        if update.model is not None and update.model not in self.model_names():
            raise InvalidRequest(
                f"model {update.model!r} is not served here; /v1/worlds serves {self.entry.name!r}",
                code="model_not_found",
                param="session.model",
            )

    async def open(
        self,
        update: wire.SessionConfig,
        send_text: Callable[[str], Awaitable[None]],
        send_bytes: Callable[[bytes], Awaitable[None]],
        on_error: Callable[[str], None],
    ) -> Runner:
        """A new session from its first ``session.update``: created, admitted (awaited where the
        model is a cluster's shared service), announced, started. A refusal (not ready, a bad seed
        image, no room) leaves no trace."""
        manager, scheduler = self.manager, self.scheduler
        if manager is None or scheduler is None:
            raise InvalidState("the world model is still loading; retry shortly", code="not_ready")
        if update.recording and self.recordings is None:
            raise InvalidRequest(
                "recording is off on this server: start it with --world-recordings DIR",
                code="recordings_disabled",
                param="session.recording",
            )
        seed_image = None
        if update.seed_image is not None:  # checked before anything is created: a refusal leaves no trace
            seed_image = decode_seed_image(update.seed_image, scheduler.spec, self.entry.name)
        session = manager.create(
            max_pending_events=update.max_pending_events or DEFAULT_MAX_PENDING_EVENTS,
            prompt=update.prompt or "",
            seed=update.seed or 0,
            seed_image=seed_image,
        )
        try:
            realtime = (update.pacing or "realtime") == "realtime"
            await scheduler.reserve(session.session_id, update.frames_per_chunk, realtime=realtime)
        except BaseException:
            session.begin_close()
            manager.finish_close(session.session_id, True)
            raise
        runner = Runner(
            session,
            manager,
            scheduler,
            send_text,
            send_bytes,
            options_of(update),
            on_error=on_error,
            max_unsent_bytes=self.settings.max_unsent_bytes,
        )
        runner.sender.send(wire.SessionCreated(self.describe(runner)))
        try:
            runner.start()
        except RemoteProtocolError:
            session.begin_close()
            manager.finish_close(session.session_id, True)
            scheduler.remove(session.session_id)  # a shared service's admission goes back
            runner.abort_sending()
            raise
        log_event(logger, "world.session_created", session=session.session_id, seed=session.seed)
        if update.recording:
            self._record(runner, update)
        return runner

    def _record(self, runner: Runner, update: wire.SessionConfig) -> None:
        """Start the session's recording (``recording.py``) and say so with ``recording.started``."""
        assert self.recordings is not None
        spec, session = runner.spec, runner.session
        header = {
            "session_id": runner.session_id,
            "model": self.entry.name,
            "weights_digest": getattr(self.model, "weights_digest", None),
            "model_options": dict(self.settings.model_options),
            "seed": session.seed,
            "prompt": session.initial_prompt,
            "seed_image": update.seed_image,
            "max_pending_events": session.max_pending_events,
            "frames_per_chunk": spec.frames_per_chunk,
            "width": spec.width,
            "height": spec.height,
            "fps": spec.fps,
        }

        def failed(code: str, message: str) -> None:
            if recorder in runner.taps:
                runner.taps.remove(recorder)
            runner.sender.send(wire.RecordingFailed(recorder.recording_id, code, message))

        recorder = self.recordings.start(header, spec.width, spec.height, spec.fps, failed)
        runner.taps.append(recorder)
        runner.sender.send(wire.RecordingStarted(recorder.recording_id, self.recordings.format.container))
        log_event(
            logger, "world.recording_started", session=runner.session_id, recording=recorder.recording_id
        )

    def spectate_token(self, runner: Runner) -> None:
        """``session.spectate_token``: a token spectators join with (``spectators.py``)."""
        if self.spectators is None or self.spectators.limits.per_session == 0:
            raise InvalidRequest("spectators are off on this server", code="spectators_disabled")
        runner.sender.send(self.spectators.mint(runner))

    def player_token(self, runner: Runner) -> None:
        """``session.player_token``: a token another player joins with (``players.py``)."""
        runner.sender.send(self.players.mint(runner))

    def reconfigure(self, runner: Runner, update: wire.SessionConfig) -> None:
        """A later ``session.update``: output and pacing change; what made the world is fixed."""
        check_fixed(runner, update)
        options, output = runner.options, update.output
        is_switching = update.pacing == "realtime" and not runner.is_realtime
        if is_switching:  # an asap session is not charged: now it is, and may not fit
            assert self.scheduler is not None
            self.scheduler.admission.check_realtime(runner.spec.frames_per_chunk)
        runner.options = dataclasses.replace(  # a new object: a chunk mid-encode keeps its snapshot
            options,
            pacing=update.pacing or options.pacing,
            format=options.format if output is None else output.format,
            quality=options.quality if output is None else output.quality,
            max_chunks_ahead=update.max_chunks_ahead or options.max_chunks_ahead,
        )
        if is_switching and self.scheduler is not None:
            self.scheduler.align(runner)  # paced from now, in step with the others
        self.wake()

    def accept(self, runner: Runner, event: wire.WorldEvent) -> None:
        """A ``world.event`` for the session's next chunks."""
        controls = [ControlInput.of(c.track, c.schema, c.data) for c in event.controls or ()]
        acceptance = runner.accept(
            Event.of(event.event_id, event.prompt, controls, event.transition_chunks or 0)
        )
        if acceptance.status is AcceptStatus.ACCEPTED and runner.taps:
            logged = msgspec.to_builtins(event)
            for tap in list(runner.taps):
                tap.event(logged)
        self.wake()

    def accept_as(self, runner: Runner, event: wire.WorldEvent, player: int) -> wire.EventAccepted:
        """A joined player's ``world.event``, for its own tracks; the answer is that player's."""
        controls = [ControlInput.of(c.track, c.schema, c.data) for c in event.controls or ()]
        built = Event.of(event.event_id, event.prompt, controls, event.transition_chunks or 0, player)
        acceptance = runner.session.accept(built)
        if acceptance.status is AcceptStatus.ACCEPTED and runner.taps:
            logged = msgspec.to_builtins(event)
            for tap in list(runner.taps):
                tap.event(logged, player)
        self.wake()
        return wire.EventAccepted(event.event_id, acceptance.status.value, acceptance.pending_event_count)

    def describe(self, runner: Runner) -> dict[str, Any]:
        """The session object of ``session.created`` and ``session.updated``, as the events carry it."""
        return msgspec.to_builtins(self.session_object(runner))  # type: ignore[no-any-return]

    def session_object(self, runner: Runner) -> wire.SessionObject:
        """The session as its client sees it: what it asked for, as applied, and the model's shape."""
        spec, session, options = runner.spec, runner.session, runner.options
        return wire.SessionObject(
            id=session.session_id,
            model=self.entry.name,
            prompt=session.initial_prompt,
            seed=session.seed,
            seed_image=session.seed_image is not None,
            pacing=options.pacing,
            output=wire.OutputConfig(options.format, options.quality),  # type: ignore[arg-type]
            max_pending_events=session.max_pending_events,
            max_chunks_ahead=options.max_chunks_ahead,
            width=spec.width,
            height=spec.height,
            fps=spec.fps,
            frames_per_chunk=spec.frames_per_chunk,
            first_chunk_frames=spec.frames_in_chunk(0),
            controls=[
                wire.TrackObject(
                    track=track.name,
                    schema=track.schema,
                    json_schema=dict(track.json_schema),
                    default=thaw(track.default),
                    is_sticky=track.is_sticky,
                    description=track.description,
                )
                for track in spec.controls
            ],
            capabilities=self.capabilities(runner),
        )

    def capabilities(self, runner: Runner) -> wire.WorldCapabilities:
        """``session.capabilities``: the session's controls and timing, the server's features."""
        spec, settings = runner.spec, self.settings
        own = runner.session.seats.tracks(1)  # a shared world's owner steers its own tracks only
        return wire.WorldCapabilities(
            controls=[track.name for track in spec.controls if own is None or track.name in own],
            fps=spec.fps,
            frames_per_chunk=spec.frames_per_chunk,
            first_chunk_frames=spec.frames_in_chunk(0),
            recording=settings.recordings is not None,
            spectators=settings.spectators is not None,
            transports=list(settings.transports),
            players=runner.session.seats.num_players,
        )
