"""vllm-omni's duplex dialect of the Realtime API, for clients that ask for it.

vllm-omni's ``DuplexClient`` connects to ``/v1/realtime?duplex=1`` and speaks
the Realtime API with a few additions that livegen's session semantics
already have under other names. A connection whose query has ``duplex=1``
gets this dialect; everything else is translated at the edge, as the beta
dialect is (``protocol/realtime/beta.py``), and the session core speaks GA only:

- The first message opens the session: ``session.update`` (answered by
  ``session.created`` carrying the updated session and the resume token; the
  GA greeting that precedes it is held back) or ``session.resume``.
- ``session.resume {session_id, resume_token, last_received_server_event_seq}``
  as the first message of a new connection (no ``?session_id=``); every
  server event carries ``server_event_seq`` (its seq in the session's stream,
  stamped by ``runtime.voice.attachment``), which the client acknowledges with
  ``session.event_ack`` (the journal then forgets it) and uses to drop
  replayed duplicates. Refusals use vllm-omni's codes; a gap in the journal is
  ``session.resync_required``.
- ``session.heartbeat`` keeps the connection alive; it needs no answer.
- ``extra_body.auto_response``: a manual commit (``turn_detection: null``)
  starts a response on its own; ``input_audio_buffer.commit``'s
  ``response_create`` forces it either way.
- ``sample_rate_hz`` (session, ``audio.input``/``audio.output``, each append)
  names the PCM rate; the session honours it (``voice/config.py``), and an
  append whose ``format`` or rate is not the session's is refused.

A field livegen cannot honour (``ref_audio``, ``temperature``, a non-final
commit, camera frames, ...) is refused with ``unsupported_parameter`` naming
it, never ignored. Pure functions and one small per-session state; no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from livegen.protocol import errors as wire_errors
from livegen.protocol import realtime as wire
from livegen.protocol.realtime import server as ev
from livegen.protocol.realtime.session import AnySessionObject, SessionObject

DUPLEX_QUERY = "duplex"
_TRUE = frozenset({"1", "true", "yes", "on"})

#: Session fields of vllm-omni's session object that livegen cannot honour (when not null).
UNSUPPORTED_SESSION_FIELDS = (
    "ref_audio",
    "temperature",
    "overlap_policy",
    "playback_commit_policy",
    "idle_timeout_s",
)
#: Keys of ``extra_body`` that livegen honours.
EXTRA_BODY_FIELDS = frozenset({"auto_response"})

#: Resume refusals, by livegen's code -> vllm-omni's (its client gives up at once on these).
RESUME_ERRORS = {
    "session_not_found": wire_errors.SESSION_RESUME_EXPIRED,
    "invalid_resume_token": wire_errors.INVALID_RESUME_TOKEN,
    "invalid_resume": wire_errors.INVALID_SESSION_RESUME,
    "invalid_value": wire_errors.SESSION_RESUME_CONFLICT,
}

_decoder = msgspec.json.Decoder()


def wants_duplex(query: Mapping[str, str]) -> bool:
    """Whether a connecting client asked for the duplex dialect (``?duplex=1``)."""
    return query.get(DUPLEX_QUERY, "").strip().lower() in _TRUE


@dataclass(frozen=True)
class Heartbeat:
    """``session.heartbeat``: nothing to do."""


@dataclass(frozen=True)
class EventAck:
    """``session.event_ack``: the client has every event up to ``seq``."""

    seq: int
    event_id: str | None


@dataclass(frozen=True)
class Resume:
    session_id: str
    resume_token: str
    last_seq: int
    event_id: str | None


Inbound = list[wire.ClientEvent] | EventAck | Heartbeat


def first_type(text: str) -> str | None:
    """The ``type`` of a connection's first message (None when it is not a typed JSON object)."""
    raw = _object(text)
    return None if raw is None else str(raw["type"])


def parse_resume(text: str) -> Resume:
    """A ``session.resume`` opening a connection, in vllm-omni's shape."""
    raw = _object(text) or {}
    event_id = _event_id(raw)
    session_id, token = raw.get("session_id"), raw.get("resume_token")
    seq = raw.get("last_received_server_event_seq", 0)
    if not (isinstance(session_id, str) and session_id and isinstance(token, str) and token and _is_seq(seq)):
        raise wire_errors.INVALID_SESSION_RESUME.error(event_id=event_id)
    return Resume(session_id, token, seq, event_id)


# vllm-omni's own server events: no event_id (its client does not read one).
class Resumed(msgspec.Struct, tag_field="type", tag="session.resumed", kw_only=True):
    """The greeting on a resuming duplex link: the session as it stands and the next token."""

    session_id: str
    session: AnySessionObject
    resume_token: str


class ResyncRequired(msgspec.Struct, tag_field="type", tag="session.resync_required", kw_only=True):
    """The answer to a resume the journal can no longer bridge: the client must start over."""

    session_id: str
    reason: str = "journal_gap"


@dataclass
class DuplexDialect:
    """One session's duplex translation state, learned from its own outgoing events."""

    #: ``session.created`` waits for the first ``session.update`` (vllm-omni opens with it).
    hold_created: bool = False
    auto_response: bool = False
    manual_turns: bool = False
    input_format: dict[str, Any] = field(default_factory=lambda: {"type": "audio/pcm", "rate": 24_000})
    #: Audio appended since the last commit or clear (a commit of nothing starts no response).
    audio_pending: bool = False
    active: set[str] = field(default_factory=set)
    #: ``session.update``s not yet answered: (event_id, auto_response to apply on success).
    _updates: deque[tuple[str | None, bool | None]] = field(default_factory=deque)
    #: The held greeting's ``capabilities``, for the ``session.created`` that replaces it.
    _capabilities: Any = msgspec.UNSET

    def inbound(self, text: str) -> Inbound:
        """The GA events for one duplex client message (raises a ``RemoteProtocolError``)."""
        raw = _object(text)
        if raw is None:
            return [wire.decode(text)]  # raises the GA error for what is not a typed object
        kind, event_id = raw["type"], _event_id(raw)
        if kind == "session.heartbeat":
            return Heartbeat()
        if kind == "session.event_ack":
            seq = raw.get("server_event_seq")
            if not isinstance(seq, int) or not _is_seq(seq):
                detail = "session.event_ack requires a non-negative integer server_event_seq"
                raise wire_errors.INVALID_EVENT_ACK.error(detail=detail, event_id=event_id)
            return EventAck(seq, event_id)
        event = wire.decode(text)
        if isinstance(event, wire.SessionUpdate):
            # vllm-omni's own session fields are not the Realtime session's: read them from the text.
            self._updates.append((event_id, _check_session(raw["session"], event_id)))
        elif isinstance(event, wire.AudioAppend):
            self._check_append(raw, event_id)
            self.audio_pending = self.audio_pending or bool(event.audio)
        elif isinstance(event, wire.AudioClear):
            self.audio_pending = False
        elif isinstance(event, wire.AudioCommit):
            return self._commit(raw, event, event_id)
        elif isinstance(event, wire.PlaybackAck):
            committed = raw.get("committed_ms")
            if committed is not None and committed != event.played_ms:
                _refuse("committed_ms", "only committed_ms equal to played_ms is supported", event_id)
        return [event]

    def outbound(self, event: ev.ServerEvent) -> ev.ServerEvent | None:
        """The duplex form of one GA server event (None: not sent)."""
        if isinstance(event, ev.SessionCreated | ev.SessionUpdated):
            self._learn(event.session)
            if isinstance(event, ev.SessionUpdated) and self._updates:
                auto = self._updates.popleft()[1]
                self.auto_response = self.auto_response if auto is None else auto
            if self.hold_created:
                if isinstance(event, ev.SessionCreated):
                    self._capabilities = getattr(event.session, "capabilities", msgspec.UNSET)
                    return None
                self.hold_created = False
                session = event.session
                if isinstance(session, SessionObject):  # the greeting's capabilities, held with it
                    session = msgspec.structs.replace(session, capabilities=self._capabilities)
                return ev.SessionCreated(event_id=event.event_id, session=session)
        elif isinstance(event, ev.Error) and self._updates:
            if event.error.get("event_id") == self._updates[0][0]:
                self._updates.popleft()  # that update was refused: its auto_response too
        elif isinstance(event, ev.ResponseCreated):
            self.active.add(event.response.id)
        elif isinstance(event, ev.ResponseDone):
            self.active.discard(event.response.id)
        return event

    def _learn(self, session: AnySessionObject) -> None:
        audio_in = session.audio.input
        self.input_format = ev.as_dict(audio_in.format)
        self.manual_turns = audio_in.turn_detection is None

    def _check_append(self, raw: dict[str, Any], event_id: str | None) -> None:
        fmt, rate = raw.get("format"), raw.get("sample_rate_hz")
        is_pcm = self.input_format.get("type") == "audio/pcm"
        if fmt is not None and (fmt != "pcm16" or not is_pcm):
            _refuse("format", f"the session's input format is {self.input_format}, not {fmt!r}", event_id)
        if rate is not None and rate != self.input_format.get("rate"):
            message = f"the session's input rate is {self.input_format.get('rate')} Hz, not {rate!r}"
            _refuse("sample_rate_hz", message, event_id)
        if raw.get("is_speech") is not None:
            _refuse("is_speech", "the server's own turn detection decides what is speech", event_id)
        for name in ("video_frames", "hints"):
            if raw.get(name):
                _refuse(name, "this server takes audio only", event_id)

    def _commit(self, raw: dict[str, Any], event: wire.AudioCommit, event_id: str | None) -> Inbound:
        if raw.get("final", True) is not True:
            _refuse("final", "every commit ends the user's turn here (final: true)", event_id)
        if raw.get("is_speech") is not None:
            _refuse("is_speech", "the server's own turn detection decides what is speech", event_id)
        create = raw.get("response_create")
        if create is not None and not isinstance(create, bool):
            detail = f"response_create must be a boolean, got {create!r}"
            raise wire_errors.INVALID_VALUE.error(detail=detail, param="response_create", event_id=event_id)
        wanted = (self.auto_response and self.manual_turns) if create is None else create
        events: list[wire.ClientEvent] = [event]
        if wanted and self.audio_pending and not self.active:
            events.append(wire.ResponseCreate(event_id=event_id))
        self.audio_pending = False
        return events


def _check_session(session: dict[str, Any], event_id: str | None) -> bool | None:
    """Refuse what livegen cannot honour; return ``extra_body.auto_response`` (None: not named)."""
    for name in UNSUPPORTED_SESSION_FIELDS:
        if session.get(name) is not None:
            _refuse(f"session.{name}", "livegen cannot honour it", event_id)
    extra = session.get("extra_body")
    if extra is None:
        return None
    if not isinstance(extra, dict):
        detail = "session.extra_body must be an object"
        raise wire_errors.INVALID_VALUE.error(detail=detail, param="session.extra_body", event_id=event_id)
    for name in extra:
        if name not in EXTRA_BODY_FIELDS:
            _refuse(f"session.extra_body.{name}", "livegen cannot honour it", event_id)
    auto = extra.get("auto_response")
    if auto is not None and not isinstance(auto, bool):
        detail = f"session.extra_body.auto_response must be a boolean, got {auto!r}"
        param = "session.extra_body.auto_response"
        raise wire_errors.INVALID_VALUE.error(detail=detail, param=param, event_id=event_id)
    return auto


def _refuse(param: str, why: str, event_id: str | None) -> None:
    raise wire_errors.UNSUPPORTED_PARAMETER.error(name=param, detail=why, param=param, event_id=event_id)


def _object(text: str) -> dict[str, Any] | None:
    try:
        raw = _decoder.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None
    return raw if isinstance(raw, dict) and isinstance(raw.get("type"), str) else None


def _event_id(raw: dict[str, Any]) -> str | None:
    event_id = raw.get("event_id")
    return event_id if isinstance(event_id, str) else None


def _is_seq(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
