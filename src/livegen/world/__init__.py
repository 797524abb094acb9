"""The world session core: a sans-IO state machine for AR-diffusion world sessions.

No asyncio, no clock, no randomness: events are accepted, ticks are planned,
committed or failed as pure state transitions; ``runtime/`` performs them.
``events`` (inputs, frozen), ``reducer`` (controls), ``tracks`` (a world's control
tracks, their checks and defaults), ``session`` (one world's transactions),
``plans`` (a chunk's plan, the effects it leaves, the prompt in force), ``players``
(a shared world's seats, each one's tracks and event queue), ``manager``
(sessions by id, tombstones), ``flow`` (credit: how far generation may run ahead
of the client), ``lifecycle`` (what a socket's message does to its session).
"""

from livegen.world.events import ControlInput, Event, FrozenDict, freeze, thaw
from livegen.world.manager import Manager
from livegen.world.reducer import LastWriteWins, Prepared, Reducer
from livegen.world.session import (
    Acceptance,
    AcceptStatus,
    Effect,
    Failure,
    Output,
    Plan,
    Rejection,
    Release,
    Session,
    Status,
)

__all__ = [
    "AcceptStatus",
    "Acceptance",
    "ControlInput",
    "Effect",
    "Event",
    "Failure",
    "FrozenDict",
    "LastWriteWins",
    "Manager",
    "Output",
    "Plan",
    "Prepared",
    "Reducer",
    "Rejection",
    "Release",
    "Session",
    "Status",
    "freeze",
    "thaw",
]
