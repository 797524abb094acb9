"""The append chain as data: attempts, their outcomes, and the effects the core returns.

Every call the session makes to its model is an ``Attempt``: appends, commits,
clears, responses, cancels and updates, numbered in wire order. The runtime
runs them one after another (``runtime/voice/runner.py``) and reports each outcome
back; the core owns what each attempt reserved and what it owes if it never
reaches the model:

- an APPEND holds an input reservation (bytes against the budget);
- a COMMIT holds one of the bounded pending-commit slots;
- a RESPOND holds a pre-created response, whose ``response.done`` it owes.

An attempt is settled exactly once (promise V3, docs/architecture.md). If a
canceller (clear, cancel, barge-in, close) settles it first, it is CANCELLED
and the canceller has sent whatever terminal event its response needed: the
runtime's later report is ignored. A failed input attempt breaks the chain:
every later input attempt is rolled back without reaching the model (wire
order would otherwise be violated) and the chain starts afresh with the next
append. ``TRANSITIONS`` is the whole life of an attempt in one table; every
change of ``Attempt.state`` goes through it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from livegen.errors import LocalProtocolError
from livegen.models.voice import ResponseRequest, StreamConfig
from livegen.protocol.realtime.server import ServerEvent, as_dict, type_of
from livegen.voice.ledger import Reservation
from livegen.voice.settings import IdFactory


class AttemptKind(StrEnum):
    APPEND = "append"
    COMMIT = "commit"
    CLEAR = "clear"
    RESPOND = "respond"
    CANCEL = "cancel"
    UPDATE = "update"
    #: The client's answer to an MCP approval request (``item_id``: the request's id).
    APPROVE = "approve"


#: Kinds that carry the user's input or a response: a failure before them stops them.
INPUT_KINDS = frozenset({AttemptKind.APPEND, AttemptKind.COMMIT, AttemptKind.RESPOND})


class AttemptState(StrEnum):
    QUEUED = "queued"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Outcome(StrEnum):
    OK = "ok"
    FAILED = "failed"


class AttemptEvent(StrEnum):
    """What can happen to an attempt."""

    #: The runtime reports the model took it.
    RAN = "ran"
    #: The runtime reports the model refused it.
    REFUSED = "refused"
    #: An earlier input attempt failed: running this one would break wire order.
    BROKEN = "broken"
    #: A canceller (clear, cancel, barge-in, close, a model switch) settled it first.
    CANCELLED = "cancelled"


_Q, _D, _F, _C = AttemptState.QUEUED, AttemptState.DONE, AttemptState.FAILED, AttemptState.CANCELLED
_REPORTS = (AttemptEvent.RAN, AttemptEvent.REFUSED)

#: (state, event) -> the next state. A queued attempt is settled once; the runtime's report
#: of an attempt already settled is ignored (it stays as it is); any other pair is refused:
#: settling an attempt twice is a bug in the core (``LocalProtocolError``).
TRANSITIONS: dict[tuple[AttemptState, AttemptEvent], AttemptState] = {
    (_Q, AttemptEvent.RAN): _D,
    (_Q, AttemptEvent.REFUSED): _F,
    (_Q, AttemptEvent.BROKEN): _F,
    (_Q, AttemptEvent.CANCELLED): _C,
    **{(settled, report): settled for settled in (_D, _F, _C) for report in _REPORTS},
}


def _moves_from(state: AttemptState) -> frozenset[AttemptState]:
    moves = (after for (before, _), after in TRANSITIONS.items() if before is state)
    return frozenset(after for after in moves if after is not state)


#: The table's moves from each state, worked out once: every append's attempt settles through
#: ``move``, so it must not walk the table on each move.
_MOVES = {state: _moves_from(state) for state in AttemptState}


@dataclass(eq=False, slots=True)  # one per append: slots make it smaller and quicker to build
class Attempt:
    seq: int
    kind: AttemptKind
    epoch: int
    pcm: bytes = field(default=b"", repr=False)
    reservation: Reservation | None = None
    item_id: str | None = None
    request: ResponseRequest | None = None
    config: StreamConfig | None = None
    #: An APPROVE's answer.
    approve: bool = False
    #: The response this attempt is bound to (a RESPOND's pre-created response).
    response_id: str | None = None
    state: AttemptState = AttemptState.QUEUED
    #: When the client's event that made this attempt was received (latency metrics).
    received_at: float = 0.0

    @property
    def is_live(self) -> bool:
        """Still owed to the model: the runtime runs it; otherwise it skips it."""
        return self.state is AttemptState.QUEUED

    def apply(self, event: AttemptEvent) -> bool:
        """Move by ``TRANSITIONS``; return whether the state changed. Raises on a refused pair."""
        after = TRANSITIONS.get((self.state, event))
        if after is None:
            raise LocalProtocolError(f"attempt {self.seq} ({self.kind}) is {self.state}: cannot be {event}")
        changed = after is not self.state
        self.state = after
        return changed

    def move(self, state: AttemptState) -> None:
        """Settle to ``state`` directly (the core cancels, finishes and fails attempts so); only a
        move of the table is taken, so settling an attempt twice is refused either way. A method,
        not a checked ``__setattr__``: that would run for every field of every append's attempt."""
        if state not in _MOVES[self.state]:
            why = f"attempt {self.seq} ({self.kind}) is {self.state}: cannot become {state}"
            raise LocalProtocolError(why)
        self.state = state


@dataclass(frozen=True)
class Send:
    """Send this server event to the client (``protocol/`` encodes it)."""

    event: ServerEvent

    @property
    def type(self) -> str:
        return type_of(self.event)

    def as_dict(self) -> dict[str, Any]:
        """The event as JSON builtins (tests read events this way)."""
        return as_dict(self.event)


def stamped(event: ServerEvent, ids: IdFactory) -> Send:
    """``event`` with a fresh ``event_id``, drawn after the event is built (ids keep their order)."""
    event.event_id = ids("event")
    return Send(event)


@dataclass(frozen=True)
class Run:
    """Put this attempt at the tail of the chain."""

    attempt: Attempt


@dataclass(frozen=True)
class ResumeChain:
    """The core has settled a failure; the chain may run its next live attempt."""


@dataclass(frozen=True)
class DropOutput:
    """Discard this response's audio still queued for the socket (it was interrupted)."""

    response_id: str


@dataclass(frozen=True)
class SwitchModel:
    """Open a stream of model ``name`` in place of the current one, then report back."""

    name: str
    config: StreamConfig


@dataclass(frozen=True)
class Closed:
    """The terminal event has been sent: close the stream and the socket."""

    reason: str


Effect = Send | Run | ResumeChain | DropOutput | SwitchModel | Closed


class HasEffects(Protocol):
    _effects: list[Effect]


_P = ParamSpec("_P")
_S = TypeVar("_S", bound=HasEffects)


def queued(method: Callable[Concatenate[_S, _P], list[Effect]]) -> Callable[Concatenate[_S, _P], None]:
    """A core entry point whose effects go on the core's queue, drained by ``take_effects``.

    Both cores (``voice/session.py``, ``world/session.py``) queue their effects rather than
    return them: an effect produced before an exception or an ``await`` (a chunk committed,
    state to release) is still there when the runtime drains, and the parts of a core (the
    voice session's speaker and turn policy) build effects without threading lists through
    every caller. A call that raises queues nothing (the state is unchanged too).
    """

    def run(core: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        core._effects += method(core, *args, **kwargs)

    functools.update_wrapper(run, method)
    return run
