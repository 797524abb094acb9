"""``Tap``: what else sees a world session's output besides its player: a recording, spectators.

A runner (``runner.py``) holds a list of taps; it and its sender (``sender.py``)
call them, on the event loop, with each chunk as it goes out (its header, its raw frames and the frames
as encoded for the player), each accepted event, each reset and the session's
close. A tap must never block or await: it queues what it needs for its own
writer (a thread for a recording, a task per spectator) and, when that writer
cannot keep up, ends itself, never the session (``recording.py``,
``spectators.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from livegen.models.world import Frames
from livegen.protocol import world as wire


class Tap(Protocol):
    def chunk(self, header: wire.ChunkHeader, frames: Frames, encoded: Sequence[bytes]) -> None:
        """A chunk on its way to the player: its header, raw RGB frames, and encoded frames."""
        ...

    def event(self, event: dict[str, Any], player: int = 1) -> None:
        """A ``world.event`` the session accepted, as the client sent it, and whose it was
        (``players.py``: 1 is the owner)."""
        ...

    def reset(self) -> None:
        """``world.reset`` done: the next chunk is chunk 0 again."""
        ...

    def closed(self) -> None:
        """The session is closing; the runner drops its taps after this."""
        ...
