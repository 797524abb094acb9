"""The pacing lead of one world stream: how long before the client needs a chunk it starts.

With acks at start (``world/flow.py``) the runner starts chunk k as late as it
can and still have it on screen in time, so that it takes in the latest input:
its lead before the client needs it is the session's longest recent step (with
its wait for a busy worker) times ``LEAD_FACTOR``, plus a margin for what a
step does not cover: encoding, the socket, the client's decoding, and a shared
machine's scheduling delays.

A fixed margin is either too small for a short chunk or too large for a long
one. Four frames (250 ms of playback) make steps of 50-100 ms and a lead that
absorbs a 30 ms hiccup; one frame (62.5 ms) makes 10-20 ms steps, and the same
hiccup is a stall. So the margin is learned: each start ack says when the
client began showing chunk k; if that came later than the previous start plus
the media time between them, chunk k was late and the client waited about that
long. The margin then covers the largest lateness of the last ``LATE_WINDOW``
acks (at most ``MAX_LATE_S``), and shrinks back as those age out. Lateness
that comes from the client itself (a slow player) only makes the lead longer:
more latency, never a stall.

Sans-IO: the runner passes the times in (seconds on its clock).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

#: How much longer than its measured step time a chunk paced by a start ack begins, and the
#: least margin for encoding and the socket on top of it.
LEAD_FACTOR = 1.25
LEAD_MARGIN_S = 0.015
#: Recent steps whose longest sets the lead; recent start acks whose largest lateness adds to it.
STEP_WINDOW = 8
LATE_WINDOW = 32
#: Lateness counted at most (a client back from a long pause is not a late chunk to cover).
MAX_LATE_S = 0.25


@dataclass
class Lead:
    """One session's pacing lead (see module docstring)."""

    steps_s: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=STEP_WINDOW))
    late_s: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=LATE_WINDOW))
    #: (media time in seconds, clock time) of the last start ack.
    last_start: tuple[float, float] | None = None

    @property
    def is_measured(self) -> bool:
        return bool(self.steps_s)

    def stepped(self, seconds: float) -> None:
        """A chunk of this session took ``seconds`` from due to done (wait for a worker included)."""
        self.steps_s.append(seconds)

    def started(self, media_s: float, now: float) -> None:
        """The client began showing the chunk due at ``media_s`` on its media clock, at ``now``."""
        if self.last_start is not None:
            last_media_s, last_now = self.last_start
            late = (now - last_now) - (media_s - last_media_s)
            self.late_s.append(min(max(0.0, late), MAX_LATE_S))
        self.last_start = (media_s, now)

    def seconds(self) -> float:
        """How long before the client needs a chunk its step should start."""
        step = max(self.steps_s, default=0.0)
        return LEAD_FACTOR * step + LEAD_MARGIN_S + max(self.late_s, default=0.0)

    def reset(self) -> None:
        """A reset restarts the media clock: the last start no longer compares."""
        self.last_start = None
