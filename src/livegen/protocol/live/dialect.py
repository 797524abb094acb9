"""GPT-Live over a voice session: the client's events as Realtime (GA) ones, and back.

A GPT-Live session is full duplex and the model owns turn-taking: no client
event creates, cancels or truncates a response. livegen serves it with an
ordinary voice session (any voice model) configured so that it does exactly
that: server VAD creates each response at the end of the user's turn and
cancels it on a barge-in (the cascade's own turn-taking, or a lockstep
model's frame-by-frame decisions), and the user's speech is transcribed.

What the dialect maps (``docs/live-protocol.md`` has the table):

- ``session.start`` -> ``session.update`` (instructions, voice, format, VAD,
  transcription) and the startup history as ``conversation.item.create``s; the
  answer to that update is ``session.started``;
- ``session.input_audio.append`` -> ``input_audio_buffer.append``; while muted
  the audio is replaced by silence of the same length, so the session's clock
  goes on and the model hears nothing;
- ``session.instructions.append`` -> a ``session.update`` of the instructions
  (the base and every append, in order); ``thinking`` -> a system item;
  ``commentary`` -> a system item and ``response.create``: the model speaks it
  in its own words. Each is acknowledged with its ``*.appended`` at once;
- ``session.close`` -> ``session.close``; ``session.closed`` comes back;
- delegation (``delegation.py``): a model with a language model is offered one
  function tool; its call is ``session.delegation.created``. Under client
  delegation the commentary answering it is the call's output and a response;
  under Responses delegation an out-of-band text response of the session runs
  the task, and its text is.

The session's timeline is the input audio's: every append moves it on by its
length (the clients stream their microphone at real time, silence included),
and acknowledgements and input transcripts are placed on it. Output audio and
its transcript go to ``timeline.OutputTimeline``, which the transport clocks.

Sans-IO: decoded events in, dicts (GA client events) and typed live events out.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

import msgspec

from livegen.errors import RemoteProtocolError
from livegen.protocol import errors as wire_errors
from livegen.protocol.live import events as live
from livegen.protocol.live.delegation import (
    DELEGATE,
    DELEGATE_NAME,
    DELEGATED_RESPONSE,
    Delegations,
    delegated_response,
    response_text,
)
from livegen.protocol.live.usage import Meter

#: The most tokens one instructions, thinking or commentary append may carry (OpenAI's bound).
MAX_APPEND_TOKENS = 500
#: Characters per token, for the bound (no tokenizer here: OpenAI's rule of thumb, rounded up).
CHARS_PER_TOKEN = 4
#: How long a session lives, as ``expires_at`` says (OpenAI's Realtime sessions: an hour).
SESSION_TTL_S = 3600
#: The voice a session speaks in when ``session.start`` names none (GPT-Live's default).
DEFAULT_VOICE = "marin"
COMMENTARY = "Say this to the user now, in your own words: {content}"
THINKING = "Context for you to know, not to say: {content}"
#: The ``event_id`` of the responses the dialect asks for itself (commentary, a delegation's
#: result): their refusals (a response already under way) are the dialect's, not the client's.
OWN_RESPONSE = "live_commentary"
#: The response the dialect asks for once the one under way has ended.
OWED_RESPONSE: dict[str, Any] = {"type": "response.create", "event_id": OWN_RESPONSE}
_BYTES_PER_MS = {"audio/pcm": 2, "audio/pcmu": 1, "audio/pcma": 1}


def bytes_per_ms(fmt: live.AudioFormat) -> int:
    return _BYTES_PER_MS[type(fmt).__struct_config__.tag] * fmt.rate // 1000  # type: ignore[index]


@dataclass
class Step:
    """What one client event makes: GA events for the voice session, live events for the client."""

    to_session: list[dict[str, Any]] = field(default_factory=list)
    to_client: list[live.ServerEvent] = field(default_factory=list)
    #: ``session.close``: the transport ends the session once ``session.closed`` is sent.
    close: bool = False


@dataclass
class LiveDialect:
    """One GPT-Live session's translation state."""

    session_id: str
    #: A native duplex (lockstep) model: it takes no instructions, context nor voice, and has no
    #: recogniser; what asks for them is refused by name (``protocol/errors.py``, ``LIVE_UNSUPPORTED``).
    native: bool = False
    #: The model has a language model that can call tools: under client delegation it is offered
    #: ``DELEGATE`` (the built-in responder cannot call one, so it is offered none).
    delegates: bool = False
    config: live.SessionConfig | None = None
    #: ``expires_at`` of the session object (the transport's clock, set when it starts).
    started_at: int = 0
    muted: bool = False
    closed: bool = False
    #: The session's timeline: milliseconds of input audio taken.
    input_ms: int = 0
    #: What the session has used (``usage.py``): the transport tells it the time and each response.
    meter: Meter = field(default_factory=Meter)
    appended_instructions: list[str] = field(default_factory=list)
    delegations: Delegations = field(default_factory=Delegations)
    #: ``session.update``s the dialect sent itself: their ``session.updated`` is not the client's.
    _own_updates: int = 0
    _started_sent: bool = False
    _start_event_id: str | None = None
    _events: int = 0
    #: Input items: (start_ms, end_ms) on the timeline, by item id (from the VAD's events).
    _spans: dict[str, list[int]] = field(default_factory=dict)
    #: A response of the dialect's own was refused as busy: it is asked for again when the one
    #: under way ends, unless another starts first (that one hears the commentary or result too).
    _owed: bool = False
    #: GA events the dialect asks of the session outside any client event (``take_requests``).
    _requests: list[dict[str, Any]] = field(default_factory=list)
    #: Delegated tasks' out-of-band responses by ``event_id``: asked for, and refused as busy
    #: (asked for again when the response under way ends).
    _delegated: dict[str, dict[str, Any]] = field(default_factory=dict)
    _delegated_owed: list[dict[str, Any]] = field(default_factory=list)

    # --- client -> session -------------------------------------------------------------
    def start(self, event: live.SessionStart, started_at: int) -> Step:
        """The session's configuration, checked (what cannot be honoured is refused by name)."""
        config = event.session
        _refuse_unserved(config, event.event_id)
        if self.native:
            _refuse_native(config, event.event_id)
        self.config, self.started_at, self._start_event_id = config, started_at, event.event_id
        step = Step(to_session=[self._update(config)])
        for item in config.input or []:
            step.to_session.append(_history_item(item))
        return step

    def inbound(self, event: live.ClientEvent) -> Step:
        """One client event after ``session.start`` (raises OpenAI's error for a bad one)."""
        if self.closed:
            raise wire_errors.LIVE_CLOSED.error(event_id=event.event_id)
        if isinstance(event, live.SessionStart):
            raise wire_errors.LIVE_ALREADY_STARTED.error(event_id=event.event_id)
        if isinstance(event, live.InputAudioAppend):
            return self._append_audio(event)
        if isinstance(event, live.InputAudioMute | live.InputAudioUnmute):
            self.muted = isinstance(event, live.InputAudioMute)
            kind = live.InputAudioMuted if self.muted else live.InputAudioUnmuted
            return Step(to_client=[kind(event_id=self._id(), client_event_id=event.event_id)])
        if isinstance(event, live.InstructionsAppend | live.ThinkingAppend | live.CommentaryAppend):
            return self._append_text(event)
        if isinstance(event, live.SessionUpdate):
            return self._session_update(event)
        if isinstance(event, live.SessionClose):
            self.closed = True
            return Step(to_session=[{"type": "session.close"}], close=True)
        name = type(event).__struct_config__.tag
        detail = "a delegated task runs here without tools: there is nothing to steer; nor output fixtures"
        raise wire_errors.LIVE_UNSUPPORTED.error(
            name=name, detail=detail, param="type", event_id=event.event_id
        )

    def _append_audio(self, event: live.InputAudioAppend) -> Step:
        try:
            pcm = base64.b64decode(event.audio, validate=True)
        except (binascii.Error, ValueError):
            raise wire_errors.INVALID_BASE64.error(
                detail="audio is not base64", event_id=event.event_id
            ) from None
        assert self.config is not None
        self.input_ms += len(pcm) // bytes_per_ms(self.format)
        audio = base64.b64encode(bytes(len(pcm))).decode() if self.muted else event.audio
        return Step(to_session=[{"type": "input_audio_buffer.append", "audio": audio}])

    def _append_text(self, event: live.Append) -> Step:
        channel = type(event).__struct_config__.tag.split(".")[1]  # type: ignore[union-attr]
        tokens = -(-len(event.content) // CHARS_PER_TOKEN)
        if tokens > MAX_APPEND_TOKENS:
            raise wire_errors.LIVE_APPEND_TOO_LONG.error(
                channel=channel, tokens=tokens, maximum=MAX_APPEND_TOKENS, event_id=event.event_id
            )
        if self.native:
            why = "a native duplex model takes no instructions, context nor commentary: it hears audio only"
            name = f"session.{channel}.append"
            raise wire_errors.LIVE_UNSUPPORTED.error(
                name=name, detail=why, param="type", event_id=event.event_id
            )
        start = self.input_ms
        step = Step()
        if event.delegation_id is not None:
            self._check_delegation_id(event.delegation_id, event.event_id)
        if isinstance(event, live.InstructionsAppend):
            self.appended_instructions.append(event.content)
            step.to_session.append(
                {"type": "session.update", "session": {"type": "realtime", "instructions": self.instructions}}
            )
            self._own_updates += 1
            ack: type[live.InstructionsAppended | live.ThinkingAppended | live.CommentaryAppended] = (
                live.InstructionsAppended
            )
        elif isinstance(event, live.ThinkingAppend):
            step.to_session.append(_system_item(THINKING.format(content=event.content)))
            ack = live.ThinkingAppended
        elif event.delegation_id is not None:  # the client's answer: the model speaks from it
            answer = self.delegations.answer(event.delegation_id, event.content, event.event_id)
            step.to_session += [answer, dict(OWED_RESPONSE)]
            ack = live.CommentaryAppended
        else:
            step.to_session += [
                _system_item(COMMENTARY.format(content=event.content)),
                dict(OWED_RESPONSE),
            ]
            ack = live.CommentaryAppended
        step.to_client.append(
            ack(event_id=self._id(), client_event_id=event.event_id, start_ms=start, end_ms=start)
        )
        return step

    def _check_delegation_id(self, delegation_id: str, event_id: str | None) -> None:
        if isinstance(self.config and self.config.delegation, live.ResponsesDelegation):
            detail = "non-null delegation ids are not accepted with Responses delegation"
            raise wire_errors.LIVE_UNSUPPORTED.error(
                name="delegation_id", detail=detail, param="delegation_id", event_id=event_id
            )
        self.delegations.check(delegation_id, event_id)

    def _session_update(self, event: live.SessionUpdate) -> Step:
        assert self.config is not None
        update = event.session
        if update.triggers:
            detail = "Decisions triggers are not served"
            raise wire_errors.LIVE_UNSUPPORTED.error(
                name="session.triggers", detail=detail, param="session.triggers", event_id=event.event_id
            )
        if update.delegation is not None:
            _check_delegation(update.delegation, event.event_id)
            self.config = msgspec.structs.replace(self.config, delegation=update.delegation)
        updated = live.SessionUpdated(
            event_id=self._id(), client_event_id=event.event_id, session=self.session()
        )
        return Step(to_client=[updated])

    # --- session -> client -------------------------------------------------------------
    def outbound(self, event: dict[str, Any]) -> list[live.ServerEvent]:
        """The live events one GA server event makes (most make none: the model's own business)."""
        kind = event.get("type")
        if kind == "session.updated":
            return self._updated()
        if kind == "error":
            return self._error(event)
        if kind == "input_audio_buffer.speech_started":
            self._spans[str(event.get("item_id"))] = [int(event.get("audio_start_ms", self.input_ms))] * 2
        elif kind == "input_audio_buffer.speech_stopped":
            span = self._spans.setdefault(str(event.get("item_id")), [self.input_ms, self.input_ms])
            span[1] = int(event.get("audio_end_ms", self.input_ms))
        elif kind == "conversation.item.input_audio_transcription.completed":
            # The whole utterance as one piece: the recogniser's interim captions come in bursts
            # of its own, and pipecat ends a user's turn 0.8 s after a piece.
            return self._input_transcript(event, str(event.get("transcript") or ""))
        elif kind == "session.closed":
            return [self.closed_event(event.get("reason") == "client_closed")]
        elif kind == "response.function_call_arguments.done" and event.get("name") == DELEGATE_NAME:
            return [self._delegate(str(event.get("call_id")), str(event.get("arguments") or ""))]
        elif kind in ("response.created", "response.done"):
            return self._response_event(kind, dict(event.get("response") or {}))
        return []

    def _delegate(self, call_id: str, arguments: str) -> live.DelegationCreated:
        """The language model called ``DELEGATE``: a delegation, run here under Responses delegation."""
        delegation = self.config.delegation if self.config else None
        if not isinstance(delegation, live.ResponsesDelegation):
            return self.delegations.created(call_id, self.input_ms, self._id())
        created = self.delegations.created(call_id, self.input_ms, self._id(), target="responses")
        request = delegated_response(created.delegation.id, arguments, delegation.responses)
        self._delegated[request["event_id"]] = request
        self._requests.append(request)
        return created

    def _response_event(self, kind: str, response: dict[str, Any]) -> list[live.ServerEvent]:
        """A response began or ended: a delegated task's, or one that settles what is owed."""
        delegation_id = (response.get("metadata") or {}).get("delegation_id")
        ended = kind == "response.done"
        if ended:
            self._requests += self._delegated_owed
            self._delegated_owed = []
        if delegation_id not in self.delegations.open:
            self._settle_owed(ended)
            return []
        # A lifecycle snapshot, as OpenAI's (its output is in the granular events, not here).
        snapshot: dict[str, Any] = {"id": response.get("id"), "status": response.get("status"), "output": []}
        name = kind
        if ended:
            name = {"completed": "response.completed", "cancelled": "response.cancelled"}.get(
                str(response.get("status")), "response.failed"
            )
            self._delegated.pop(DELEGATED_RESPONSE + delegation_id, None)
            text = response_text(response) or "The task could not be done."
            self._requests += [self.delegations.answer(delegation_id, text, None), dict(OWED_RESPONSE)]
        inner = {"type": name, "response": snapshot}
        return [live.ResponseEvent(event_id=self._id(), event=inner, delegation_id=delegation_id)]

    def _settle_owed(self, ended: bool) -> None:
        """A response started (it takes what was owed) or ended (the owed one is asked for now)."""
        if self._owed:
            self._owed = False
            if ended:
                self._requests.append(dict(OWED_RESPONSE))

    def take_requests(self) -> list[dict[str, Any]]:
        """The GA events the dialect asks of the session itself since the last call (the link sends
        them as if the client had): a commentary's or a delegation's result's owed response."""
        requests, self._requests = self._requests, []
        return requests

    def _updated(self) -> list[live.ServerEvent]:
        if self._own_updates > 0:
            self._own_updates -= 1
            return []
        if self._started_sent:
            return []
        self._started_sent = True
        return [
            live.SessionStarted(
                event_id=self._id(), client_event_id=self._start_event_id, session=self.session()
            )
        ]

    def _error(self, event: dict[str, Any]) -> list[live.ServerEvent]:
        body = dict(event.get("error") or {})
        client_event_id = body.pop("event_id", None)
        busy = wire_errors.CONVERSATION_ALREADY_HAS_ACTIVE_RESPONSE.code
        if str(client_event_id).startswith(DELEGATED_RESPONSE) and body.get("code") == busy:
            self._delegated_owed.append(self._delegated[str(client_event_id)])
            return []
        if client_event_id == OWN_RESPONSE and body.get("code") == busy:
            # The model was already speaking (the client asked for no response: GPT-Live's model
            # owns them): it speaks the commentary, or the delegation's result, once that ends.
            self._owed = True
            return []
        body["client_event_id"] = client_event_id
        if not self._started_sent and self._own_updates == 0:
            client_event_id = client_event_id or self._start_event_id
        return [live.Error(event_id=self._id(), error=body, client_event_id=client_event_id)]

    def _input_transcript(self, event: dict[str, Any], text: str) -> list[live.ServerEvent]:
        item_id = str(event.get("item_id"))
        if not text:
            return []
        start, end = self._spans.get(item_id, [self.input_ms, self.input_ms])
        return [
            live.InputTranscriptDelta(event_id=self._id(), delta=text, start_ms=start, end_ms=max(start, end))
        ]

    def closed_event(self, requested: bool) -> live.SessionClosed:
        reason: live.CloseReason = "close_requested" if requested else "connection_lost"
        return live.SessionClosed(
            event_id=self._id(), reason=reason, session=self.session(), usage=self.usage()
        )

    def usage_event(self) -> live.SessionUsageUpdated:
        usage, window = self.usage(), self.meter.window()
        return live.SessionUsageUpdated(event_id=self._id(), usage=usage, context_window=window)

    def usage(self) -> live.Usage:
        return self.meter.usage(self.input_ms)

    # --- the session object -------------------------------------------------------------
    @property
    def format(self) -> live.AudioFormat:
        audio = self.config.audio if self.config else None
        return (audio.format if audio else None) or live.Pcm()

    @property
    def instructions(self) -> str:
        base = (self.config.instructions if self.config else None) or ""
        return "\n\n".join(part for part in (base, *self.appended_instructions) if part)

    def session(self) -> dict[str, Any]:
        """The SDK's ``SessionResource``: the configuration as resolved, with the server's defaults."""
        assert self.config is not None
        resolved = msgspec.to_builtins(self.config)
        audio = resolved.setdefault("audio", {})
        audio.setdefault("format", msgspec.to_builtins(self.format))
        audio.setdefault("output", {}).setdefault("voice", DEFAULT_VOICE)
        resolved.setdefault("delegation", {"type": "client"})
        return {
            "id": self.session_id,
            "expires_at": self.started_at + SESSION_TTL_S,
            "status": "active",
            **resolved,
        }

    def _update(self, config: live.SessionConfig) -> dict[str, Any]:
        fmt = msgspec.to_builtins(self.format)
        voice = config.audio.output.voice if config.audio and config.audio.output else None
        audio_out: dict[str, Any] = {"format": fmt}
        if isinstance(voice, str) and voice != DEFAULT_VOICE:
            audio_out["voice"] = voice
        audio_in: dict[str, Any] = {"format": fmt}
        # A native model owns its turns (naming turn_detection there is refused) and has no
        # recogniser: only its own words come back.
        if not self.native:
            audio_in["turn_detection"] = {
                "type": "server_vad",
                "create_response": True,
                "interrupt_response": True,
            }
            audio_in["transcription"] = {"model": "whisper-1"}
        session: dict[str, Any] = {
            "type": "realtime",
            "output_modalities": ["audio"],
            "audio": {"input": audio_in, "output": audio_out},
        }
        if self.instructions:
            session["instructions"] = self.instructions
        if self.delegates:  # client or Responses delegation (Decisions is refused)
            session["tools"] = [DELEGATE]
        return {"type": "session.update", "session": session}

    def next_event_id(self) -> str:
        """An ``event_id`` for a live event the transport makes itself (a call's transcripts)."""
        return self._id()

    def _id(self) -> str:
        self._events += 1
        return f"event_live_{self._events:06d}"


def _refuse_unserved(config: live.SessionConfig, event_id: str | None) -> None:
    if config.triggers:
        detail = "Decisions triggers are not served"
        raise wire_errors.LIVE_UNSUPPORTED.error(
            name="session.triggers", detail=detail, param="session.triggers", event_id=event_id
        )
    if config.client is not None:
        detail = "data channel event permissions are not served (every event is allowed)"
        raise wire_errors.LIVE_UNSUPPORTED.error(
            name="session.client", detail=detail, param="session.client", event_id=event_id
        )
    if config.delegation is not None:
        _check_delegation(config.delegation, event_id)


def _refuse_native(config: live.SessionConfig, event_id: str | None) -> None:
    voice = config.audio.output.voice if config.audio and config.audio.output else None
    asked = (
        ("session.instructions", bool(config.instructions), "the model takes no instructions"),
        ("session.input", bool(config.input), "the model hears audio only: it takes no history"),
        (
            "session.audio.output.voice",
            voice not in (None, DEFAULT_VOICE),
            "the model speaks in its own voice",
        ),
    )
    for param, is_asked, why in asked:
        if is_asked:
            raise wire_errors.LIVE_UNSUPPORTED.error(name=param, detail=why, param=param, event_id=event_id)


def _check_delegation(delegation: live.Delegation, event_id: str | None) -> None:
    if isinstance(delegation, live.DecisionsDelegation):
        detail = "Decisions delegation is not served; use client or responses"
        param = "session.delegation.type"
        raise wire_errors.LIVE_UNSUPPORTED.error(name=param, detail=detail, param=param, event_id=event_id)


def _system_item(text: str) -> dict[str, Any]:
    content = [{"type": "input_text", "text": text}]
    return {
        "type": "conversation.item.create",
        "item": {"type": "message", "role": "system", "content": content},
    }


def _history_item(item: live.InitialItem) -> dict[str, Any]:
    role = "system" if item.role == "developer" else item.role
    part = "output_text" if role == "assistant" else "input_text"
    content = [{"type": part, "text": piece.text} for piece in item.content]
    return {"type": "conversation.item.create", "item": {"type": "message", "role": role, "content": content}}


def refusal(error: RemoteProtocolError, event_id: str) -> live.Error:
    """The ``error`` event for a client mistake (the session goes on)."""
    return live.error_event(error, event_id)
