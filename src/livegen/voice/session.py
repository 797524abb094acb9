"""The voice session core: one state machine per session, sans-IO.

Everything a voice session decides happens here, in one object that one task
drives (promise V1, docs/architecture.md): client events (``receive``), the outcomes
of model calls (``settle``), model outputs (``on_output``) and the clock
(``tick``). Each call takes ``now`` (seconds, any monotonic origin) and queues
effects for the runtime, which drains them with ``take_effects``: typed server
events to send (``protocol/realtime/``, which alone encodes them), attempts to
put on the append chain (``voice/chain.py``), and the end of the session. Both
cores queue, as the world core does (``chain.queued`` says why). A client
mistake raises a ``RemoteProtocolError`` with the session unchanged and nothing
queued; ``reject`` turns it into OpenAI's ``error`` event.

The epoch fence (promise V2): a client cancel, an input clear, an output clear
and a barge-in each advance ``epoch``; attempts carry the epoch of their
moment, and model outputs of an older epoch are dropped here, before any
event is built. The response of an older epoch has already been finished by
whoever advanced the epoch, so nothing is left waiting for them.

The session keeps the state that every part reads (configuration, epoch,
attempts, input ledger) and dispatches; three plain objects it owns do the
rest, each through a narrow interface and testable alone:

- ``speaker`` (``output.py``): the live response, playback, response events;
- ``turns`` (``turns.py``): speech edges and the idle timeout become
  ``TurnStep`` decisions (barge in, commit, respond) the session carries out;
- ``conversation`` (``conversation.py``): the items, in order, bounded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from enum import StrEnum
from typing import Any, ClassVar

from livegen.errors import CapacityExceeded, RemoteProtocolError
from livegen.models.voice import OutputKind, VoiceOutput
from livegen.protocol import realtime as wire
from livegen.protocol.audio import AudioFormat, InputDecoder, pcm_ms
from livegen.protocol.errors import (
    CANNOT_UPDATE_VOICE,
    CONVERSATION_ALREADY_HAS_ACTIVE_RESPONSE,
    INPUT_AUDIO_BUFFER_COMMIT_EMPTY,
    INVALID_RESUME,
    MODEL_APPEND_FAILED,
    MODEL_CHANGE_UNSUPPORTED,
    NO_RESPONSES_IN_TRANSCRIPTION,
    RESPONSE_CANCEL_NOT_ACTIVE,
    TOO_MANY_PENDING_COMMITS,
    UNKNOWN_EVENT_TYPE,
)
from livegen.protocol.realtime import server as ev
from livegen.protocol.realtime.session import AnySessionObject, SessionObject
from livegen.voice import duplex, item_events, mcp
from livegen.voice.calls import CallLedger
from livegen.voice.chain import (
    INPUT_KINDS,
    Attempt,
    AttemptKind,
    AttemptState,
    Closed,
    Effect,
    Outcome,
    ResumeChain,
    Run,
    Send,
    SwitchModel,
    queued,
    stamped,
)
from livegen.voice.config import Config, apply_update, check_transcription_model, check_voice, format_words
from livegen.voice.conversation import Conversation, Item
from livegen.voice.input_rate import InputRate
from livegen.voice.ledger import InputLedger, Playback
from livegen.voice.mcp_tools import check_hosts
from livegen.voice.options import ResponseOptions, plan_response, response_options, session_options
from livegen.voice.output import Speaker
from livegen.voice.response import Response
from livegen.voice.settings import IdFactory, Limits, ModelFacts
from livegen.voice.turns import TurnPolicy, TurnStep
from livegen.voice.vad import Edge


class Phase(StrEnum):
    OPEN = "open"
    CLOSED = "closed"


class Session:
    def __init__(
        self,
        session_id: str,
        model: ModelFacts,
        ids: IdFactory,
        limits: Limits | None = None,
        canonical_name: Callable[[str], str] | None = None,
        session_type: str = "realtime",
    ) -> None:
        self.id = session_id
        self.model = model
        #: A model's registered name for any of its aliases (a pure lookup, injected).
        self.canonical_name = canonical_name or (lambda name: name)
        self.ids = ids
        self.limits = limits or Limits()
        #: "transcription" when the client asked for one at connect (``?intent=transcription``).
        self.config = Config(model=model.name, session_type=session_type)
        self.phase = Phase.OPEN
        self.epoch = 0
        self.ledger = InputLedger(self.limits.max_input_bytes)
        self._input_rate = InputRate(self.limits.input_rate_factor, self.limits.input_burst_ms)
        self.conversation = Conversation()
        self.calls = CallLedger()
        self.speaker = Speaker(
            ids, self.limits, model.output_rate, self.conversation, self.calls, self._response_finished
        )
        self.turns = TurnPolicy(ids)
        self.attempts: list[Attempt] = []  # live attempts, in wire order
        self._next_seq = 0
        self._decoder = InputDecoder(self.config.input_format, model.input_rate)
        #: Input ms accepted since the session began (the VAD clock) and since the last commit.
        self.input_ms = 0.0
        self.buffer_bytes = 0
        self.num_stale_outputs = 0
        #: The model may change (session.update) until it has been given input or a request.
        self._is_model_locked = False
        self._pending_config: Config | None = None
        self._pending_event_id: str | None = None
        self._effects: list[Effect] = []
        #: Whether a dropped link may resume the session (the server's grace period; its runtime sets it).
        self.is_resumable = True
        self._reset_vad()

    # --- helpers ---------------------------------------------------------------------

    def _send(self, event: ev.ServerEvent) -> Send:
        return stamped(event, self.ids)

    def _attempt(self, kind: AttemptKind, now: float, **fields: Any) -> Attempt:
        if kind is not AttemptKind.UPDATE:
            self._is_model_locked = True
        attempt = Attempt(self._next_seq, kind, self.epoch, received_at=now, **fields)
        self._next_seq += 1
        self.attempts.append(attempt)
        return attempt

    def _control(self, kind: AttemptKind, now: float, **fields: Any) -> list[Effect]:
        """A cancel, clear or update for the model; one still queued of its kind is brought up to date.

        Coalescing keeps these bounded (one queued per kind) however fast a client sends them,
        and is exact: a queued clear or cancel has nothing of the newer epoch ahead of it, and
        only the newest configuration matters.
        """
        for attempt in self.attempts:
            if attempt.kind is kind:
                attempt.epoch = self.epoch
                attempt.config = fields.get("config", attempt.config)
                return []
        return [Run(self._attempt(kind, now, **fields))]

    def _session_object(self, config: Config) -> AnySessionObject:
        """The session object with what its model can do (``capabilities``, an extension)."""
        session = config.to_object(self.id)
        if isinstance(session, SessionObject):
            session.capabilities = duplex.capabilities(self.model, self.is_resumable)
        return session

    def _reset_vad(self) -> None:
        self.turns.configure(self.config.turn_detection, self.model.has_vad, self.model.input_rate)

    @property
    def response(self) -> Response | None:
        """The live response (the speaker's)."""
        return self.speaker.response

    @property
    def playbacks(self) -> dict[str, Playback]:
        """Playback ledgers of recent answers (the speaker's), by item id."""
        return self.speaker.playbacks

    @property
    def is_closed(self) -> bool:
        return self.phase is Phase.CLOSED

    @property
    def num_pending_commits(self) -> int:
        return sum(1 for a in self.attempts if a.kind is AttemptKind.COMMIT)

    # --- lifecycle -------------------------------------------------------------------

    @queued
    def open(self, now: float) -> list[Effect]:
        return [self._send(ev.SessionCreated(session=self._session_object(self.config)))]

    def _close(self, now: float, reason: str = "client_closed") -> list[Effect]:
        """The terminal: end the live response, give back every reservation, send ``session.closed``."""
        if self.is_closed:
            return []
        effects = self.speaker.end(now, "cancelled", {"type": "cancelled", "reason": "session_closed"})
        for attempt in self.attempts:
            attempt.move(AttemptState.CANCELLED)
        self.attempts.clear()
        self.ledger.clear()
        self.buffer_bytes = 0
        self.phase = Phase.CLOSED
        effects.append(self._send(ev.SessionClosed(session_id=self.id, reason=reason)))
        effects.append(Closed(reason))
        return effects

    def _reject(self, error: RemoteProtocolError) -> list[Effect]:
        """OpenAI's error event for a client mistake; the session goes on."""
        if self.is_closed:
            return []
        return [self._send(ev.Error(error=error.to_error_body()))]

    close = queued(_close)
    reject = queued(_reject)

    def take_effects(self) -> list[Effect]:
        """The effects queued since the last call, in order (see ``chain.queued``)."""
        effects, self._effects = self._effects, []
        return effects

    # --- client events ---------------------------------------------------------------

    @queued
    def receive(self, event: wire.ClientEvent, now: float) -> list[Effect]:
        """Apply one client event. Raises ``RemoteProtocolError`` (state unchanged) on a mistake."""
        if self.is_closed:
            return []
        handler = self._handlers.get(type(event))
        if handler is None:  # pragma: no cover - every decoded type has a handler
            raise UNKNOWN_EVENT_TYPE.error(event_type=event.TYPE, supported=wire.supported())
        try:
            return handler(self, event, now)
        except RemoteProtocolError as error:
            raise error.with_event_id(event.event_id) from None

    def _on_session_update(self, event: wire.SessionUpdate, now: float) -> list[Effect]:
        config = apply_update(self.config, event.session)
        if self.model.is_duplex:
            duplex.check_setting(self.config, config, event.session)
        check_hosts(config.mcp_tools, self.limits.mcp_allowed_hosts, "session.tools")
        config, listings = mcp.with_servers(self.config, config, self.ids, self.limits.mcp_timeout_s)
        if config.model != self.config.model:
            config = replace(config, model=self.canonical_name(config.model))
        if config.model != self.config.model:
            return self._switch_model(config, event.event_id)
        if config.voice != self.config.voice and any(p.generated_ms for p in self.playbacks.values()):
            raise CANNOT_UPDATE_VOICE.error()
        if config.voice != self.config.voice:
            check_voice(config.voice, self.model.accepts_voice)
        if config.transcription_model != self.config.transcription_model:
            check_transcription_model(config.transcription_model, self.model.transcription_models)
        if config.input_format != self.config.input_format:
            self._decoder = InputDecoder(config.input_format, self.model.input_rate)
        old_vad = self.config.turn_detection
        self.config = config
        if config.turn_detection != old_vad:
            self._reset_vad()
        effects = self._control(AttemptKind.UPDATE, now, config=config.stream_config())
        effects.append(self._send(ev.SessionUpdated(session=config.to_object(self.id))))
        return effects + mcp.listing(listings, self.conversation, self._send)

    def _switch_model(self, config: Config, event_id: str | None) -> list[Effect]:
        """A new model, allowed until the current one has been given input or asked to respond."""
        if self._is_model_locked:
            raise MODEL_CHANGE_UNSUPPORTED.error(model=self.config.model)
        for attempt in self.attempts:  # updates owed to the old stream: the new one opens with the config
            attempt.move(AttemptState.CANCELLED)
        self.attempts.clear()
        self._pending_config = config
        self._pending_event_id = event_id
        return [SwitchModel(config.model, config.stream_config())]

    def fix_formats(self, fixed: bool) -> None:
        """A new link: one that fixes the audio formats (a WebRTC call's track, PCM16 at 24 kHz)
        takes only a session in them, and its updates may not change them; another allows that
        again. Raises ``ValueError`` (nothing changed) for formats a fixed link cannot carry."""
        configs = [c for c in (self.config, self._pending_config) if c is not None]
        track = AudioFormat()
        for config in configs if fixed else ():
            if config.input_format != track or config.output_format != track:
                formats = f"{format_words(config.input_format)} in, {format_words(config.output_format)} out"
                carried = f"a call's track carries {format_words(track)} both ways"
                raise ValueError(f"the session's audio is {formats}; {carried}: resume it over a WebSocket")
        self.config = replace(self.config, formats_fixed=fixed)
        if self._pending_config is not None:
            self._pending_config = replace(self._pending_config, formats_fixed=fixed)

    @queued
    def model_switched(self, model: ModelFacts, now: float) -> list[Effect]:
        """The runtime opened a stream of the new model: adopt its rates and the pending config."""
        config = self._pending_config
        if config is None or self.is_closed:
            return []
        self._pending_config = None
        self.model = model
        self.speaker.output_rate = model.output_rate
        self.config = config
        self._decoder = InputDecoder(config.input_format, model.input_rate)
        self._reset_vad()
        return [self._send(ev.SessionUpdated(session=config.to_object(self.id)))]

    @queued
    def model_switch_failed(self, error: RemoteProtocolError) -> list[Effect]:
        """The new model could not open: the session keeps its model and configuration."""
        self._pending_config = None
        error.with_event_id(self._pending_event_id)
        return self._reject(error)

    def _on_append(self, event: wire.AudioAppend, now: float) -> list[Effect]:
        decoder = self._decoder
        # Bounded before decoding, from the base64 length, so a refused flood costs nothing.
        audio_ms = len(event.audio) * 3 // 4 * 1000 / (decoder.wire.rate * decoder.wire.bytes_per_sample)
        self._input_rate.check(audio_ms, now)
        data = event.audio_bytes()
        decoder.check(data)
        if not data:
            return []
        # Reserve before decoding so a refused append leaves the resampler untouched.
        reservation = self.ledger.reserve(decoder.estimate(len(data)))
        pcm = decoder.decode(data)
        self.ledger.resize(reservation, len(pcm))
        self._input_rate.spend(audio_ms)
        self.buffer_bytes += len(pcm)
        self.input_ms += pcm_ms(len(pcm), self.model.input_rate)
        append = self._attempt(AttemptKind.APPEND, now, pcm=pcm, reservation=reservation)
        effects: list[Effect] = [Run(append)]
        for transition in self.turns.feed(pcm):
            if transition.edge is Edge.STARTED:
                effects += self._speech_started(transition.audio_ms, now)
            else:
                effects += self._speech_stopped(transition.audio_ms, now)
        return effects

    def _on_commit(self, event: wire.AudioCommit, now: float) -> list[Effect]:
        if self.buffer_bytes == 0:
            raise INPUT_AUDIO_BUFFER_COMMIT_EMPTY.error(min_ms=1, buffered_ms=0.0)
        return self._commit(self.ids("item"), now)

    def _commit(self, item_id: str, now: float) -> list[Effect]:
        if self.num_pending_commits >= self.limits.max_pending_commits:
            raise TOO_MANY_PENDING_COMMITS.error(pending=self.num_pending_commits)
        effects: list[Effect] = []
        tail = self._decoder.flush()  # the turn's last ms, held in the resampler
        if tail:
            reservation = self.ledger.reserve(len(tail), is_forced=True)
            effects.append(Run(self._attempt(AttemptKind.APPEND, now, pcm=tail, reservation=reservation)))
        self.buffer_bytes = 0
        self.turns.committed()
        item = Item(id=item_id, role="user", content_type="input_audio")
        previous = self.conversation.add(item)
        commit = self._attempt(AttemptKind.COMMIT, now, item_id=item_id)
        return [
            *effects,
            Run(commit),
            self._send(ev.InputAudioBufferCommitted(item_id=item_id, previous_item_id=previous)),
            self._send(ev.ItemAdded(item=item.to_object(), previous_item_id=previous)),
            self._send(ev.ItemDone(item=item.to_object(), previous_item_id=previous)),
        ]

    def _on_clear(self, event: wire.AudioClear, now: float) -> list[Effect]:
        effects = self._advance_epoch(now, "client_cancelled")
        # Only audio after the last commit is dropped: committed turns still reach the model.
        last_commit = max((a.seq for a in self.attempts if a.kind is AttemptKind.COMMIT), default=-1)
        dropped = [a for a in self.attempts if a.kind is AttemptKind.APPEND and a.seq > last_commit]
        if dropped and dropped[0].reservation is not None:
            self.ledger.rollback(dropped[0].reservation)
        for attempt in dropped:
            attempt.move(AttemptState.CANCELLED)
        self.attempts = [a for a in self.attempts if a.is_live]
        self._decoder.flush()  # what the resampler held is uncommitted audio too: dropped
        self.buffer_bytes = 0
        self.turns.dropped()
        effects += self._control(AttemptKind.CLEAR, now)
        effects.append(self._send(ev.InputAudioBufferCleared()))
        return effects

    def _on_response_create(self, event: wire.ResponseCreate, now: float) -> list[Effect]:
        if self.config.is_transcription:
            raise NO_RESPONSES_IN_TRANSCRIPTION.error()
        if self.model.is_duplex:
            raise duplex.refused_event(event.TYPE)
        if self.response is not None:
            raise CONVERSATION_ALREADY_HAS_ACTIVE_RESPONSE.error(response_id=self.response.id)
        options = response_options(event.response or {}, self.config, self.conversation, self.ids)
        return self._create_response(now, options)

    def _create_response(self, now: float, options: ResponseOptions | None = None) -> list[Effect]:
        """Pre-create a response (``response.created``) and put its request on the chain."""
        plan = options or session_options(self.config)
        response, request = plan_response(
            plan, self.config, self.conversation, self.ids("resp"), self.epoch, self.model.output_rate
        )
        respond = self._attempt(AttemptKind.RESPOND, now, request=request, response_id=response.id)
        return [self.speaker.begin(response), Run(respond)]

    def _on_response_cancel(self, event: wire.ResponseCancel, now: float) -> list[Effect]:
        if self.response is None or event.response_id not in (None, self.response.id):
            raise RESPONSE_CANCEL_NOT_ACTIVE.error()
        return self._advance_epoch(now, "client_cancelled")

    def _on_output_clear(self, event: wire.OutputAudioClear, now: float) -> list[Effect]:
        effects = self._advance_epoch(now, "client_cancelled")
        effects.append(self._send(ev.OutputAudioBufferCleared(response_id=None)))
        return effects

    def _on_playback_ack(self, event: wire.PlaybackAck, now: float) -> list[Effect]:
        self.speaker.ack(event.response_id, event.item_id, event.played_ms)
        return []

    def _on_close(self, event: wire.SessionClose, now: float) -> list[Effect]:
        return self._close(now, "client_closed")

    def _on_resume(self, event: wire.SessionResume, now: float) -> list[Effect]:
        raise INVALID_RESUME.error(
            detail="session.resume is the first event of a new connection to "
            "/v1/realtime?session_id=<id>, not an event inside a session"
        )

    _handlers: ClassVar[dict[type[wire.ClientEvent], Callable[[Session, Any, float], list[Effect]]]] = {
        wire.SessionUpdate: _on_session_update,
        wire.AudioAppend: _on_append,
        wire.AudioCommit: _on_commit,
        wire.AudioClear: _on_clear,
        wire.ItemCreate: item_events.on_create,
        wire.ItemRetrieve: item_events.on_retrieve,
        wire.ItemDelete: item_events.on_delete,
        wire.ItemTruncate: item_events.on_truncate,
        wire.ResponseCreate: _on_response_create,
        wire.ResponseCancel: _on_response_cancel,
        wire.OutputAudioClear: _on_output_clear,
        wire.PlaybackAck: _on_playback_ack,
        wire.SessionClose: _on_close,
        wire.SessionResume: _on_resume,
    }

    # --- the fence and interruption ---------------------------------------------------

    def _advance_epoch(self, now: float, reason: str) -> list[Effect]:
        """Advance the fence; end the live response (cancelled), truncating history to what was heard."""
        effects = self.speaker.end(now, "cancelled", {"type": "cancelled", "reason": reason})
        self.epoch += 1
        effects += self.speaker.stop_playing(now)
        effects += self._control(AttemptKind.CANCEL, now)
        return effects

    def barge_in(self, now: float) -> list[Effect]:
        """The user took the turn: the live response ends cancelled, cut where it was heard."""
        return self._advance_epoch(now, "turn_detected")

    def _response_finished(self, response: Response, now: float) -> None:
        """The speaker ended ``response``: its attempts are owed nothing; the idle clock starts."""
        for attempt in self.attempts:
            if attempt.response_id == response.id:
                attempt.move(AttemptState.CANCELLED)  # the speaker sent its terminal: this is it
        self.attempts = [a for a in self.attempts if a.is_live]
        # The idle clock starts when the user has heard the whole answer.
        playback = response.playback
        self.turns.answered(now if playback is None else playback.played_until(now), self.input_ms)

    # --- model outputs and the clock -------------------------------------------------

    @queued
    def on_output(self, output: VoiceOutput, now: float) -> list[Effect]:
        """Apply one model output; outputs of an older epoch are dropped (the fence)."""
        if self.is_closed:
            return []
        kind = output.kind
        if kind in (OutputKind.MCP_TOOLS_LISTED, OutputKind.MCP_TOOLS_FAILED):  # the session's, no epoch's
            return mcp.listed(output, self.conversation, self._send)
        if output.epoch != self.epoch:
            self.num_stale_outputs += 1
            return []
        if self.model.is_duplex and output.response_id is None and kind in duplex.TURN_KINDS:
            return duplex.on_turn_output(self, output, now)
        if kind is OutputKind.SPEECH_STARTED:
            return self._speech_started(output.audio_ms, now) if self.model.has_vad else []
        if kind is OutputKind.SPEECH_STOPPED:
            return self._speech_stopped(output.audio_ms, now) if self.model.has_vad else []
        if kind in (OutputKind.TRANSCRIPT_DELTA, OutputKind.TRANSCRIPT_DONE):
            return self.speaker.on_transcript(output, self.turns.item_id)
        response = self.speaker.live(output.response_id)
        if kind is OutputKind.ERROR and (output.response_id is None or response is None):
            return self.speaker.model_failed(output.text, output.code)
        if response is None:
            return []
        return self.speaker.on_output(response, output, now)

    @queued
    def tick(self, now: float) -> list[Effect]:
        """Release audio that is due; fire the idle timeout when it is due."""
        if self.is_closed:
            return []
        effects = self.speaker.tick(now)
        deadline = self._idle_deadline()
        if deadline is not None and now >= deadline:
            effects += self._take_turn(self.turns.timed_out(self.input_ms, self.buffer_bytes > 0), now)
        return effects

    def next_deadline(self) -> float | None:
        """When ``tick`` next has something to do, if anything."""
        # No list and no min() of one: this runs before every event the runtime handles.
        speaking, idle = self.speaker.next_deadline(), self._idle_deadline()
        if speaking is None or idle is None:
            return idle if speaking is None else speaking
        return min(speaking, idle)

    @queued
    def on_outbox_overflow(self, now: float) -> list[Effect]:
        """The client reads too slowly: fail the live response, with a clear error."""
        return self.speaker.on_outbox_overflow(now)

    def _idle_deadline(self) -> float | None:
        vad = self.config.turn_detection
        if vad is None or vad.idle_timeout_ms is None:
            return None  # no idle timeout (the common case), asked before every event: decided first
        # The idle timeout answers, and a transcription session never does.
        can_idle = self.response is None and not self.config.is_transcription and not self.is_closed
        return self.turns.deadline(vad, can_idle)

    # --- turns -------------------------------------------------------------------------

    def _speech_started(self, audio_ms: float, now: float) -> list[Effect]:
        vad = self.config.turn_detection
        if vad is None:
            return []
        return self._take_turn(self.turns.started(vad, audio_ms, self.speaker.is_speaking(now)), now)

    def _speech_stopped(self, audio_ms: float, now: float) -> list[Effect]:
        vad = self.config.turn_detection
        if vad is None:
            return []
        can_respond = self.response is None and not self.config.is_transcription and not self.model.is_duplex
        return self._take_turn(self.turns.stopped(vad, audio_ms, self.buffer_bytes > 0, can_respond), now)

    def _take_turn(self, step: TurnStep, now: float) -> list[Effect]:
        """Carry out the turn policy's decision: its event, then barge in, commit, respond."""
        effects: list[Effect] = [step.event]
        if step.barge_in:
            effects += self.barge_in(now)
        if step.commit is not None:
            try:
                effects += self._commit(step.commit, now)
            except CapacityExceeded as error:
                return [*effects, *self._reject(error)]
        if step.respond:
            effects += self._create_response(now)
        return effects

    # --- the chain's reports -----------------------------------------------------------

    @queued
    def settle(self, attempt: Attempt, outcome: Outcome, now: float, error: str = "") -> list[Effect]:
        """The runtime ran ``attempt``; settle what it reserved. A cancelled attempt is ignored."""
        if not attempt.is_live or self.is_closed:
            return []
        self.attempts.remove(attempt)
        if outcome is Outcome.OK:
            attempt.move(AttemptState.DONE)
            if attempt.reservation is not None:
                self.ledger.commit(attempt.reservation)
            return []
        attempt.move(AttemptState.FAILED)
        effects = [*self._break_chain(attempt, now)]
        message = f"the model refused a {attempt.kind.value}: {error or 'no reason given'}"
        effects.append(self._send(ev.Error(error=MODEL_APPEND_FAILED.event_body(detail=message))))
        effects.append(ResumeChain())
        return effects

    def _drop_uncommitted(self, now: float) -> list[Effect]:
        """The turn in progress is rolled back: the model, the resampler and the detector drop
        what they hold of it too, so the next append starts afresh (a model that refused input
        for being full would otherwise refuse every append after)."""
        self.buffer_bytes = 0
        self.turns.dropped()
        self._decoder.flush()
        return self._control(AttemptKind.CLEAR, now)

    def _break_chain(self, failed: Attempt, now: float) -> list[Effect]:
        """A failed input attempt: roll back it and every later input attempt; fail their response."""
        effects: list[Effect] = []
        if failed.reservation is not None:
            self.ledger.rollback(failed.reservation)
        later = [a for a in self.attempts if a.kind in INPUT_KINDS and a.seq > failed.seq]
        if failed.kind in INPUT_KINDS:
            for attempt in later:
                attempt.move(AttemptState.FAILED)
                if attempt.reservation is not None:
                    self.ledger.rollback(attempt.reservation)
            self.attempts = [a for a in self.attempts if a.is_live]
            effects += self._drop_uncommitted(now)
        bound = {a.response_id for a in [failed, *later] if a.response_id}
        if self.response is not None and self.response.id in bound:
            error = MODEL_APPEND_FAILED.body(detail="the model failed to take input for this response")
            details = {"type": "failed", "error": error}
            effects += self.speaker.end(now, "failed", details)
        return effects


__all__ = ["IdFactory", "Limits", "ModelFacts", "Phase", "Session"]
