"""What the speech pool hands its workers' supervisors (``Job``: one ``speak`` call's parts and
audio so far) and what a call gives back (``Speech``). Apart from ``tts.py``'s pool, which runs
the supervisors, and ``supervisor.py``, which runs the jobs, so that neither imports the other.
"""

from __future__ import annotations

import concurrent.futures
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Speech:
    pcm: bytes
    #: The engine that spoke: "piper", or "espeak" when Piper is not there.
    engine: str


@dataclass
class Job:
    """One ``speak`` call: its parts, spoken one at a time, and the audio so far."""

    owner: Hashable
    parts: deque[str]
    engine: str
    voice: str
    speed: float
    future: concurrent.futures.Future[Speech] = field(default_factory=concurrent.futures.Future)
    pcm: list[bytes] = field(default_factory=list)
    engine_used: str = ""
