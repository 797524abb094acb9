"""A voice session's lifecycle as data: one table of (state, event) -> (next state, actions).

As h11 holds a connection's states, this module holds a voice session's life
with respect to its client links, and nothing else: no link, no task, no clock.
The runtime's session owner (``runtime/voice/owner.py``) waits for an event,
looks it up in ``TRANSITIONS``, performs the actions in order and moves to the
next state; every change of its state goes through ``transition``, and a pair
that is not in the table is a bug of ours (``LocalProtocolError``), never the
client's.

The states, and the events that move a session on from each::

    OPENING   OPENED -> LIVE           OPEN_FAILED -> ENDED
    LIVE      LINK_LOST -> LOST        HANDOFF -> RESUMING      GOODBYE, RUNNER_ENDED -> ENDED
    LOST      MAY_PARK -> PARKED       NO_PARK -> ENDED
    PARKED    HANDOFF -> RESUMING      GRACE_EXPIRED, EVICTED, RUNNER_ENDED -> ENDED
    RESUMING  RESUMED -> LIVE          RESUME_FAILED -> LOST (it parks again if it may)

Two kinds of state. In LIVE and PARKED the owner *waits* for what happens to
the session from outside (its link closes, its runner ends, a resume arrives,
the grace period passes, the parked budget needs its room). In OPENING, LOST
and RESUMING the owner is *busy* with the step that names the state (opening
the runner, asking the parked budget for room, replaying the journal to a
resuming link), and the step's outcome is the next event. ENDED is final.
"""

from __future__ import annotations

from enum import StrEnum

from livegen.errors import LocalProtocolError


class State(StrEnum):
    #: Busy: the session's core, model stream and runner are being made.
    OPENING = "opening"
    #: Waiting: attached to a client link, which reads and writes its events.
    LIVE = "live"
    #: Busy: the link is gone; the session parks if the grace period and the parked budget allow.
    LOST = "lost"
    #: Waiting: no link, journaling its events, for up to the grace period.
    PARKED = "parked"
    #: Busy: greeting and journal replay to a resuming link, then live on it.
    RESUMING = "resuming"
    #: Over: the runner has stopped and every link it had is closed and released.
    ENDED = "ended"


class Event(StrEnum):
    """What can happen to a session: the outcome of a busy state's step, or news from outside."""

    #: The runner exists (OPENING's step).
    OPENED = "opened"
    #: The model could not open a stream; the client gets OpenAI's error (OPENING's step).
    OPEN_FAILED = "open_failed"
    #: The client closed its link with 1000 or 1001: it meant to leave, nothing to resume.
    GOODBYE = "goodbye"
    #: The link closed any other way: the client may come back.
    LINK_LOST = "link_lost"
    #: The runner ended on its own (``session.closed``, a failure, a client that does not read).
    RUNNER_ENDED = "runner_ended"
    #: A resuming link claimed the session's token (``session.resume``).
    HANDOFF = "handoff"
    #: The parked budget has room for the session (LOST's step).
    MAY_PARK = "may_park"
    #: No grace period, the runner is over, or the session is bigger than the budget (LOST's step).
    NO_PARK = "no_park"
    #: The grace period passed without a resume.
    GRACE_EXPIRED = "grace_expired"
    #: A newer parked session needed the room (the oldest parked sessions go first).
    EVICTED = "evicted"
    #: The resuming link has its greeting and replay and is live (RESUMING's step).
    RESUMED = "resumed"
    #: A replay the journal cannot give, or the resuming link died during it (RESUMING's step).
    RESUME_FAILED = "resume_failed"


class Action(StrEnum):
    """What the owner does on a transition, in the order the table lists them."""

    #: Count the session (``--max-sessions``), start its runner, apply the key's bound
    #: configuration and a duplex client's first message.
    START = "start"
    #: OpenAI's error and close 1011 on the opening link, and release it.
    REFUSE = "refuse"
    #: Close the lost link (1000) and release its handler; the session has no link.
    RETIRE = "retire"
    #: Stop writing to the attached link and close it with 4001 in the background (it may
    #: not be reading): a resume replaces it.
    REPLACE = "replace"
    #: Into the parked set, which the parked budget counts.
    PARK = "park"
    #: Out of the parked set.
    UNPARK = "unpark"
    #: The resuming link becomes the session's link.
    ATTACH = "attach"
    #: Close the resuming link whose take-over failed (1008) and release it.
    REJECT = "reject"
    #: Stop the runner, forget the session, close its link with the code its end calls for,
    #: release every handler and turn away resumes that came too late.
    END = "end"


#: The states in which the owner waits for news from outside; in the others it runs their step.
WAITING = frozenset({State.LIVE, State.PARKED})

_O, _L, _X, _P, _R, _E = State.OPENING, State.LIVE, State.LOST, State.PARKED, State.RESUMING, State.ENDED
_A = Action

#: The whole lifecycle: (state, event) -> (next state, actions in order). Any other pair is a bug.
TRANSITIONS: dict[tuple[State, Event], tuple[State, tuple[Action, ...]]] = {
    (_O, Event.OPENED): (_L, (_A.START,)),
    (_O, Event.OPEN_FAILED): (_E, (_A.REFUSE,)),
    (_L, Event.GOODBYE): (_E, (_A.END,)),
    (_L, Event.RUNNER_ENDED): (_E, (_A.END,)),
    (_L, Event.LINK_LOST): (_X, (_A.RETIRE,)),
    # Whether the old link is gone (the usual case) or still looks open (half-open): the new wins.
    (_L, Event.HANDOFF): (_R, (_A.REPLACE,)),
    (_X, Event.MAY_PARK): (_P, (_A.PARK,)),
    (_X, Event.NO_PARK): (_E, (_A.END,)),
    (_P, Event.HANDOFF): (_R, (_A.UNPARK,)),
    (_P, Event.GRACE_EXPIRED): (_E, (_A.UNPARK, _A.END)),
    (_P, Event.EVICTED): (_E, (_A.UNPARK, _A.END)),
    (_P, Event.RUNNER_ENDED): (_E, (_A.UNPARK, _A.END)),
    (_R, Event.RESUMED): (_L, (_A.ATTACH,)),
    # The session goes back to LOST: it parks again, with a new grace period, if it may.
    (_R, Event.RESUME_FAILED): (_X, (_A.REJECT,)),
}


def transition(state: State, event: Event) -> tuple[State, tuple[Action, ...]]:
    """The next state and the actions that take the session there; raises ``LocalProtocolError``
    for an event the state cannot have (a bug in the owner, not the client's doing)."""
    try:
        return TRANSITIONS[state, event]
    except KeyError:
        raise LocalProtocolError(f"a voice session that is {state} cannot have {event}") from None
