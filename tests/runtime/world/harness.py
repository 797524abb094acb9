"""Real world runners over a given scheduler, recording what each session was sent.

Shared by the scheduler tests (one KV model test double) and the worker-pool
tests (several worker test doubles): the scheduler differs, the runners,
session cores and KV pools are the real ones.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

import msgspec

from livegen.models.world import ControlTrack, KVGeometry
from livegen.runtime.world.runner import Options, Runner
from livegen.runtime.world.scheduler import Scheduler
from livegen.world import Manager

GEOMETRY = KVGeometry(
    num_layers=1, num_heads=1, head_dim=4, tokens_per_frame=2, window_frames=4, sink_frames=1
)


class RunnerHarness:
    def __init__(self, scheduler: Scheduler, tracks: Sequence[ControlTrack]) -> None:
        self.scheduler = scheduler
        counter = itertools.count()
        self.manager = Manager(tracks=tracks, new_id=lambda: f"s{next(counter)}")
        #: Session id -> decoded JSON messages and raw frame bytes, in the order sent.
        self.sent: dict[str, list[Any]] = {}

    def open(self, **options: Any) -> Runner:
        session = self.manager.create()
        messages = self.sent.setdefault(session.session_id, [])

        async def send_text(text: str) -> None:
            messages.append(msgspec.json.decode(text))

        async def send_bytes(data: bytes) -> None:
            messages.append(data)

        runner = Runner(
            session,
            self.manager,
            self.scheduler,
            send_text,
            send_bytes,
            Options(**{"pacing": "asap", **options}),
        )
        runner.start()
        return runner

    def chunks(self, session_id: str) -> list[dict[str, Any]]:
        return [m for m in self.sent[session_id] if isinstance(m, dict) and m["type"] == "world.chunk"]

    def errors(self, session_id: str) -> list[dict[str, Any]]:
        return [m["error"] for m in self.sent[session_id] if isinstance(m, dict) and m["type"] == "error"]

    def error_codes(self, session_id: str) -> list[str]:
        return [error["code"] for error in self.errors(session_id)]


def settled(runner: Runner, chunks: int) -> bool:
    """``chunks`` committed and written, none in flight: an ack now counts (W7), and makes it due.

    (A committed chunk is not yet written while its frames encode: an ack for it then is refused,
    as a client cannot ack what it has not received, and a test that acked it waits forever.)"""
    return runner.session.chunk_index == chunks and not runner.flow.unsent and runner._ticking is None


async def until(condition: Any, timeout_s: float = 15.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():  # noqa: ASYNC110 - polls state that several tasks change
            await asyncio.sleep(0.005)
