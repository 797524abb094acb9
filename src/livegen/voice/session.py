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

The session keeps what every part reads (the configuration, the model, the
epoch), its lifecycle and the model switch, and dispatches each client event
to the part that owns it. The parts are plain objects it owns, each with its
own state, testable alone, and each declaring the narrow interface it needs of
the session (an ``Owner`` protocol), so none imports this module:

- ``chain`` (``attempts.py``): the live attempts, in wire order;
- ``listener`` (``listener.py``): the input buffer from append to commit, its
  reservations, and the turn policy (``turns.py``: speech edges and the idle
  timeout become commits, barge-ins and answers);
- ``speaker`` (``output.py``): the live response, the client's requests about
  it, playback (``heard.py``), response events;
- ``conversation`` (``conversation.py``): the items, in order, bounded.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from enum import StrEnum
from typing import Any

from livegen.errors import RemoteProtocolError
from livegen.models.voice import OutputKind, VoiceOutput
from livegen.protocol import realtime as wire
from livegen.protocol.audio import AudioFormat
from livegen.protocol.errors import (
    CANNOT_UPDATE_VOICE,
    INVALID_RESUME,
    MODEL_APPEND_FAILED,
    MODEL_CHANGE_UNSUPPORTED,
    OUTBOX_OVERFLOW,
    UNKNOWN_EVENT_TYPE,
)
from livegen.protocol.realtime import server as ev
from livegen.protocol.realtime.session import SessionObject
from livegen.voice import duplex, item_events, mcp
from livegen.voice.attempts import Attempts
from livegen.voice.calls import CallLedger
from livegen.voice.chain import (
    Attempt,
    AttemptKind,
    Closed,
    Effect,
    Outcome,
    ResumeChain,
    Send,
    SwitchModel,
    queued,
    stamped,
)
from livegen.voice.config import Config, apply_update, check_transcription_model, check_voice
from livegen.voice.conversation import Conversation
from livegen.voice.formats import format_words
from livegen.voice.ledger import Playback
from livegen.voice.listener import Listener
from livegen.voice.mcp_tools import check_hosts
from livegen.voice.output import Speaker
from livegen.voice.response import Response
from livegen.voice.settings import IdFactory, Limits, ModelFacts

#: A client event's handler: the event and ``now``, to the effects it queues.
Handler = Callable[[Any, float], list[Effect]]


class Phase(StrEnum):
    OPEN = "open"
    CLOSED = "closed"


def _refuse_resume(event: wire.SessionResume, now: float) -> list[Effect]:
    raise INVALID_RESUME.error(
        detail="session.resume is the first event of a new connection to "
        "/v1/realtime?session_id=<id>, not an event inside a session"
    )


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
        self.conversation = Conversation()
        self.calls = CallLedger()
        self.chain = Attempts()
        #: The live attempts, in wire order (the chain's list: one object, pruned in place).
        self.attempts: list[Attempt] = self.chain.live
        self.speaker = Speaker(self, self.chain, ids, self.limits, self.conversation, self.calls)
        self.listener = Listener(self, ids, self.limits, self.chain, self.conversation, self.speaker)
        self.speaker.on_finished = self.listener.answered
        #: The parts' state that callers read through the session (the same objects).
        self.ledger = self.listener.ledger
        self.playbacks: dict[str, Playback] = self.speaker.playbacks
        self.turns = self.listener.turns
        self.num_stale_outputs = 0
        self._pending_config: Config | None = None
        self._pending_event_id: str | None = None
        self._effects: list[Effect] = []
        #: Whether a dropped link may resume the session (the server's grace period; its runtime sets it).
        self.is_resumable = True
        self._reset_vad()
        self._handlers = self._route()

    def _route(self) -> dict[type[wire.ClientEvent], Handler]:
        """Each client event to the part that owns what it changes."""
        listener, speaker = self.listener, self.speaker
        return {
            wire.SessionUpdate: self._on_session_update,
            wire.AudioAppend: listener.on_append,
            wire.AudioCommit: listener.on_commit,
            wire.AudioClear: listener.on_clear,
            wire.ItemCreate: functools.partial(item_events.on_create, self),
            wire.ItemRetrieve: functools.partial(item_events.on_retrieve, self),
            wire.ItemDelete: functools.partial(item_events.on_delete, self),
            wire.ItemTruncate: functools.partial(item_events.on_truncate, self),
            wire.ResponseCreate: speaker.on_response_create,
            wire.ResponseCancel: speaker.on_response_cancel,
            wire.OutputAudioClear: speaker.on_output_clear,
            wire.PlaybackAck: speaker.on_playback_ack,
            wire.SessionClose: lambda event, now: self._close(now, "client_closed"),
            wire.SessionResume: _refuse_resume,
        }

    def send(self, event: ev.ServerEvent) -> Send:
        """``event`` stamped with a fresh id, to send."""
        return stamped(event, self.ids)

    def _reset_vad(self) -> None:
        """A new turn detection or model: the listener's detector starts afresh."""
        self.listener.reset_turns()

    @property
    def response(self) -> Response | None:
        """The live response (the speaker's)."""
        return self.speaker.response

    @property
    def is_closed(self) -> bool:
        return self.phase is Phase.CLOSED

    @property
    def num_pending_commits(self) -> int:
        return self.chain.num_pending_commits

    @property
    def buffer_bytes(self) -> int:
        """Input bytes buffered since the last commit (the listener's)."""
        return self.listener.buffer_bytes

    @property
    def input_ms(self) -> float:
        """Input ms accepted since the session began, the VAD clock (the listener's)."""
        return self.listener.input_ms

    # --- lifecycle -------------------------------------------------------------------

    @queued
    def open(self, now: float) -> list[Effect]:
        session = self.config.to_object(self.id)
        if isinstance(session, SessionObject):  # what its model can do (``capabilities``, an extension)
            session.capabilities = duplex.capabilities(self.model, self.is_resumable)
        return [self.send(ev.SessionCreated(session=session))]

    def _close(self, now: float, reason: str = "client_closed") -> list[Effect]:
        """The terminal: end the live response, give back every reservation, send ``session.closed``."""
        if self.is_closed:
            return []
        effects = self.speaker.end(now, "cancelled", {"type": "cancelled", "reason": "session_closed"})
        self.chain.cancel_all()
        self.listener.close()
        self.phase = Phase.CLOSED
        effects.append(self.send(ev.SessionClosed(session_id=self.id, reason=reason)))
        effects.append(Closed(reason))
        return effects

    close = queued(_close)

    @queued
    def reject(self, error: RemoteProtocolError) -> list[Effect]:
        """OpenAI's error event for a client mistake; the session goes on."""
        if self.is_closed:
            return []
        return [self.send(ev.Error(error=error.to_error_body()))]

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
            return handler(event, now)
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
        if config.model != self.config.model:  # allowed until the model has been given input or a request
            if self.chain.is_model_locked:
                raise MODEL_CHANGE_UNSUPPORTED.error(model=self.config.model)
            self.chain.cancel_all()  # updates owed to the old stream: the new one opens with the config
            self._pending_config, self._pending_event_id = config, event.event_id
            return [SwitchModel(config.model, config.stream_config())]
        if config.voice != self.config.voice and any(p.generated_ms for p in self.playbacks.values()):
            raise CANNOT_UPDATE_VOICE.error()
        if config.voice != self.config.voice:
            check_voice(config.voice, self.model.accepts_voice)
        if config.transcription_model != self.config.transcription_model:
            check_transcription_model(config.transcription_model, self.model.transcription_models)
        if config.input_format != self.config.input_format:
            self.listener.set_format(config.input_format, self.model.input_rate)
        old_vad, self.config = self.config.turn_detection, config
        if config.turn_detection != old_vad:
            self._reset_vad()
        effects = self.chain.control(AttemptKind.UPDATE, self.epoch, now, config=config.stream_config())
        effects.append(self.send(ev.SessionUpdated(session=config.to_object(self.id))))
        return effects + mcp.listing(listings, self.conversation, self.send)

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
        self.config = config
        self.listener.set_format(config.input_format, model.input_rate)
        self._reset_vad()
        return [self.send(ev.SessionUpdated(session=config.to_object(self.id)))]

    def model_switch_failed(self, error: RemoteProtocolError) -> None:
        """The new model could not open: the session keeps its model and configuration."""
        self._pending_config = None
        error.with_event_id(self._pending_event_id)
        self.reject(error)

    # --- the fence and interruption ---------------------------------------------------

    def interrupt(self, now: float, reason: str) -> list[Effect]:
        """Advance the fence; end the live response (cancelled), truncating history to what was heard."""
        effects = self.speaker.end(now, "cancelled", {"type": "cancelled", "reason": reason})
        self.epoch += 1
        effects += self.speaker.heard.stop_playing(now)
        effects += self.chain.control(AttemptKind.CANCEL, self.epoch, now)
        return effects

    def barge_in(self, now: float) -> list[Effect]:
        """The user took the turn: the live response ends cancelled, cut where it was heard."""
        return self.interrupt(now, "turn_detected")

    # --- model outputs and the clock -------------------------------------------------

    @queued
    def on_output(self, output: VoiceOutput, now: float) -> list[Effect]:
        """Apply one model output; outputs of an older epoch are dropped (the fence)."""
        if self.is_closed:
            return []
        kind = output.kind
        if kind in (OutputKind.MCP_TOOLS_LISTED, OutputKind.MCP_TOOLS_FAILED):  # the session's, no epoch's
            return mcp.listed(output, self.conversation, self.send)
        if output.epoch != self.epoch:
            self.num_stale_outputs += 1
            return []
        if self.model.is_duplex and output.response_id is None and kind in duplex.TURN_KINDS:
            return duplex.on_turn_output(self, output, now)
        if kind is OutputKind.SPEECH_STARTED:
            return self.listener.speech_started(output.audio_ms, now) if self.model.has_vad else []
        if kind is OutputKind.SPEECH_STOPPED:
            return self.listener.speech_stopped(output.audio_ms, now) if self.model.has_vad else []
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
        return self.speaker.tick(now) + self.listener.tick(now)

    def next_deadline(self) -> float | None:
        """When ``tick`` next has something to do, if anything."""
        # No list and no min() of one: this runs before every event the runtime handles.
        speaking = self.speaker.next_deadline()
        idle = None if self.is_closed else self.listener.idle_deadline()
        if speaking is None or idle is None:
            return idle if speaking is None else speaking
        return min(speaking, idle)

    @queued
    def on_outbox_overflow(self, now: float) -> list[Effect]:
        """The client reads too slowly: fail the live response, with a clear error."""
        return self.speaker.end(now, "failed", {"type": "failed", "error": OUTBOX_OVERFLOW.body()})

    # --- the chain's reports -----------------------------------------------------------

    @queued
    def settle(self, attempt: Attempt, outcome: Outcome, now: float, error: str = "") -> list[Effect]:
        """The runtime ran ``attempt``; settle what it reserved. A cancelled attempt is ignored.

        A failed input attempt breaks the chain: it and every later input attempt are rolled
        back (``Listener.broken``), and the response they were bound to fails."""
        if not attempt.is_live or self.is_closed:
            return []
        self.chain.settle(attempt, outcome is Outcome.OK)
        if outcome is Outcome.OK:
            if attempt.reservation is not None:
                self.ledger.commit(attempt.reservation)
            return []
        later = self.chain.break_after(attempt)
        effects = self.listener.broken(attempt, later, now)
        bound = {a.response_id for a in [attempt, *later] if a.response_id}
        if self.response is not None and self.response.id in bound:
            body = MODEL_APPEND_FAILED.body(detail="the model failed to take input for this response")
            effects += self.speaker.end(now, "failed", {"type": "failed", "error": body})
        message = f"the model refused a {attempt.kind.value}: {error or 'no reason given'}"
        effects.append(self.send(ev.Error(error=MODEL_APPEND_FAILED.event_body(detail=message))))
        effects.append(ResumeChain())
        return effects


__all__ = ["IdFactory", "Limits", "ModelFacts", "Phase", "Session"]
