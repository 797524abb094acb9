"""A world socket's session as data: one table of (state, client message) -> action.

As ``voice/lifecycle.py`` holds a voice session's states, this module holds
what a world socket may do with its session, and nothing else: no socket, no
runner, no clock. The runtime's session owner (``runtime/world/owner.py``)
looks each decoded client message up in ``DISPATCH`` and performs the action;
a pair that is not in the table is a bug of ours (``LocalProtocolError``).

The states, and what each client message does in them::

    NEW      session.update: OPEN         anything else: NOT_CREATED (an error, the socket reads on)
    OPEN     session.update: RECONFIGURE  world.event, chunk.ack, world.reset, session.close,
                                          session.spectate_token, session.player_token: DRIVE
    CLOSED   chunk.ack: IGNORE            anything else: CLOSED (an error, the socket reads on)

A successful OPEN moves NEW to OPEN; a ``session.close`` that closes the
session moves OPEN to CLOSED. Acks of chunks in flight at the close are moot,
not errors, so CLOSED ignores them.
"""

from __future__ import annotations

from enum import StrEnum

from livegen.errors import LocalProtocolError


class State(StrEnum):
    #: No session yet: the socket's first ``session.update`` makes one.
    NEW = "new"
    #: The session runs; its runner takes the client's messages.
    OPEN = "open"
    #: ``session.close`` closed it; the socket stays open until the client leaves.
    CLOSED = "closed"


class Message(StrEnum):
    """A decoded client message, as the table tells them apart."""

    UPDATE = "session.update"
    EVENT = "world.event"
    ACK = "chunk.ack"
    RESET = "world.reset"
    CLOSE = "session.close"
    SPECTATE_TOKEN = "session.spectate_token"
    PLAYER_TOKEN = "session.player_token"


class Action(StrEnum):
    #: Open the session through the engine (a refusal leaves it NEW).
    OPEN = "open"
    #: Change the session's output and pacing; answer ``session.updated``.
    RECONFIGURE = "reconfigure"
    #: Hand the message to the session's runner.
    DRIVE = "drive"
    #: Nothing: the message is moot.
    IGNORE = "ignore"
    #: Refuse with ``session_not_created``.
    NOT_CREATED = "not_created"
    #: Refuse with ``session_closed``.
    CLOSED = "closed"


_N, _O, _C = State.NEW, State.OPEN, State.CLOSED
_DRIVEN = (
    Message.EVENT,
    Message.ACK,
    Message.RESET,
    Message.CLOSE,
    Message.SPECTATE_TOKEN,
    Message.PLAYER_TOKEN,
)

#: The whole table: (state, message) -> action. Any other pair is a bug.
DISPATCH: dict[tuple[State, Message], Action] = {
    (_N, Message.UPDATE): Action.OPEN,
    **{(_N, message): Action.NOT_CREATED for message in _DRIVEN},
    (_O, Message.UPDATE): Action.RECONFIGURE,
    **{(_O, message): Action.DRIVE for message in _DRIVEN},
    **{(_C, message): Action.CLOSED for message in Message},
    (_C, Message.ACK): Action.IGNORE,
}


def dispatch(state: State, message: Message) -> Action:
    """What the owner does with ``message`` in ``state``; raises ``LocalProtocolError`` for a
    pair the table lacks (a bug in the owner, not the client's doing)."""
    try:
        return DISPATCH[state, message]
    except KeyError:
        raise LocalProtocolError(f"a world session that is {state} cannot take {message}") from None
