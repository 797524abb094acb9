"""Every error livegen raises, under one root, typed by whose fault it is.

The tree (indent is inheritance)::

    LivegenError                    root: ``except LivegenError`` catches all of ours
    ├── ProtocolError               a wire or session rule was broken (abstract)
    │   ├── LocalProtocolError      we broke it: a bug in livegen, never sent as-is
    │   └── RemoteProtocolError     the client broke it: becomes an ``error`` event
    │       ├── InvalidRequest      malformed JSON, unknown type, bad field
    │       ├── InvalidState        a legal event at an illegal moment
    │       ├── CapacityExceeded    a bounded queue or budget is full (never blocks)
    │       └── Unauthorized        missing or wrong API key
    ├── ModelError                  a model failed; the cause is in ``__cause__``
    │   ├── ModelContractError      a model broke its contract (wrong echo, bad shape)
    │   └── StateEvicted            model-side state of a session is gone
    ├── ConfigError                 bad server configuration (unknown model, bad flag)
    └── InternalError               a bug we caught at a boundary

The split of local and remote follows h11: the cores raise remote errors for
the client's mistakes, and the endpoint that owns the connection turns each one
into an OpenAI-shaped ``error`` event for that client only. A local error means
livegen itself is wrong; the endpoint logs it and fails the session, never the
server. Each remote error carries the ``code`` and ``message`` of the event it
becomes, and the client's ``event_id`` when the offending event had one. On the
voice wire, codes and messages come only from the table in
``protocol/errors.py`` (OpenAI's words where OpenAI defines the error).

Cores may add subclasses of the classes above in their own modules; the tree
here is the contract every layer relies on.
"""

from __future__ import annotations

from typing import Any, ClassVar


class LivegenError(Exception):
    """The root of every error livegen raises on purpose."""


class ProtocolError(LivegenError):
    """A wire or session rule was broken. Abstract: raise a subclass.

    Attributes:
        code: short snake_case machine code, the ``error.code`` of the event.
        message: a sentence for a person, quoting what was expected and got.
        param: the offending field, when one field is to blame.
        event_id: the client's id of the offending event, when it had one.
    """

    #: OpenAI's ``error.type`` for this family of errors.
    error_type: ClassVar[str] = "invalid_request_error"
    #: The code used when the raiser gives none.
    default_code: ClassVar[str] = "protocol_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        event_id: str | int | None = None,
    ) -> None:
        if type(self) is ProtocolError:
            raise TypeError("ProtocolError is abstract; raise LocalProtocolError or RemoteProtocolError")
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.param = param
        self.event_id = event_id

    def with_event_id(self, event_id: str | int | None) -> ProtocolError:
        """Attach the client's event id if none is set yet; return self for chaining."""
        if self.event_id is None:
            self.event_id = event_id
        return self

    def to_error_body(self) -> dict[str, Any]:
        """The ``error`` object of an OpenAI-shaped error event."""
        return {
            "type": self.error_type,
            "code": self.code,
            "message": self.message,
            "param": self.param,
            "event_id": self.event_id,
        }


class LocalProtocolError(ProtocolError):
    """We attempted an illegal transition: a bug in livegen."""

    error_type = "server_error"
    default_code = "internal_error"


class RemoteProtocolError(ProtocolError):
    """The client broke a rule; becomes an ``error`` event to that client only."""


class InvalidRequest(RemoteProtocolError):
    """Malformed JSON, an unknown event type, or a field of the wrong shape."""

    default_code = "invalid_request"


class InvalidState(RemoteProtocolError):
    """A well-formed event that the session cannot take in its current state."""

    default_code = "invalid_state"


class CapacityExceeded(RemoteProtocolError):
    """A bounded queue, budget or pool is full. Refused at once, never blocks."""

    default_code = "capacity_exceeded"


class Unauthorized(RemoteProtocolError):
    """The request lacks the API key, or has a wrong one."""

    error_type = "authentication_error"
    default_code = "invalid_api_key"


class ModelError(LivegenError):
    """A model call failed. The original exception is kept in ``__cause__``."""

    code: ClassVar[str] = "model_error"


class StageUnavailable(ModelError):
    """A remote speech stage (``--tts-base-url``, ``--asr-base-url``) was down, too slow, or
    answered an error or garbage: the response that needed it fails with the stage's code."""


class AsrUnavailable(StageUnavailable):
    code = "asr_unavailable"


class TtsUnavailable(StageUnavailable):
    code = "tts_unavailable"


class SpeechServiceUnavailable(StageUnavailable):
    """The cluster's shared speech service (``--workers``, ``cluster/speech.py``) died
    or could not be reached during a call: only the responses it was serving fail."""

    code = "speech_service_unavailable"


class LockstepServiceUnavailable(ModelError):
    """The cluster's lockstep service of a duplex model (``--workers``,
    ``cluster/lockstep.py``) died or could not be reached: the sessions it was
    serving end (their state was in it); Ray restarts it and new sessions are admitted."""

    code = "lockstep_service_unavailable"


class ModelContractError(ModelError):
    """A model broke its contract: a wrong metadata echo, a bad shape or rate."""

    code = "model_contract_error"


class StateEvicted(ModelError):
    """The model-side state of a session is gone; the session must reset."""

    code = "state_evicted"


class ConfigError(LivegenError):
    """The server or a session was configured wrongly (unknown model, bad flag)."""


class InternalError(LivegenError):
    """A bug caught at a boundary, so that one session fails and not the server."""
