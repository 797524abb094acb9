"""A tiny-world session of 10,000 frames through the runtime: nothing grows per chunk or event.

The real runner, session core, scheduler, worker pool, KV pool and tiny-world model, driven in
process as the socket owner drives them (events, acks at start, a reset, a duplicate and a stale
event now and then), without a socket: 2,500 chunks over the wire would take minutes. The model
is tiny-world's code on a small random network (one layer of width 8) so that 10,000 frames fit
a CI budget; its KV geometry (sink 1, window 2), chunking (4 frames) and path are the served
ones. Checked: the largest RoPE position stays within the context the network was trained for;
every per-session collection of every layer stays within its stated bound; and, sampled while
the session is idle (no credit left) after the first thousand frames and at the end, the live
tensor bytes and the objects the collector tracks do not grow (``tests/long_run.py``).
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
import torch

from livegen.errors import InvalidState
from livegen.models.room import game
from livegen.models.room.procedural import ProceduralWorld
from livegen.models.tinyworld import model as tinyworld
from livegen.models.tinyworld.net import Config, Net
from livegen.runtime.world.runner import MAX_QUEUED_EVENTS, Options, Runner
from livegen.runtime.world.scheduler import Scheduler
from livegen.world import ControlInput, Event, LastWriteWins, Manager, Status
from livegen.world.lead import LATE_WINDOW, STEP_WINDOW
from long_run import FRAMES, Totals, check_totals, totals
from runtime.world.harness import until

ACTIONS = ("right", "down", "left", "up", "none")
MAX_PENDING = 8
AHEAD = 2


class Client:
    """Counts frames, acks each chunk once written, and sends one event a chunk."""

    def __init__(self) -> None:
        self.runner: Runner | None = None
        self.frames = 0
        self.chunks = 0
        self.chunk_index = -1
        self.event_ids = itertools.count(1)
        self.errors: list[str] = []
        self.paused = False
        self.unacked: list[int] = []

    async def send_text(self, text: str) -> None:
        if '"type":"world.chunk"' in text:
            self.chunk_index = int(text.split('"chunk_index":')[1].split(",")[0])
        elif '"type":"error"' in text:
            self.errors.append(text.split('"code":"')[1].split('"')[0])

    async def send_bytes(self, data: bytes) -> None:
        self.frames += 1

    def chunk_written(self) -> None:
        """After each chunk reaches the socket: ack it (unless paused) and send the next event."""
        runner = self.runner
        assert runner is not None
        self.chunks += 1
        if self.paused:
            self.unacked.append(self.chunk_index)
        else:
            runner.ack(self.chunk_index, "start")
        event_id = next(self.event_ids)
        action = ACTIONS[self.chunks % len(ACTIONS)]
        prompt = (
            f"a {('red', 'green', 'blue')[self.chunks // 200 % 3]} room" if self.chunks % 200 == 0 else None
        )
        control = ControlInput.of("action", "livegen.action.v1", {"action": action})
        runner.accept(Event.of(event_id, prompt, [control], 2 if prompt else 0))
        if self.chunks % 50 == 0:
            runner.accept(Event.of(event_id, None, [control]))  # a retry: a duplicate, not applied twice
            try:
                runner.accept(Event.of(1, None, [control]))  # long applied: stale
            except InvalidState as exc:
                runner.sender.send_error(exc)


def _small_tiny_world() -> tinyworld.TinyWorld:
    torch.manual_seed(0)
    net = Net(Config(d_model=8, num_layers=1, num_heads=1, mlp_ratio=1, stem_channels=4, up_channels=4))
    return tinyworld.TinyWorld(net.eval(), num_steps=1)


async def test_ten_thousand_frames_through_the_runtime_hold_every_ledger_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch.set_num_threads(1)
    model = _small_tiny_world()
    highest = [-1]
    real_rope = Net.rope

    def rope(self: Net, positions: torch.Tensor) -> Any:
        highest[0] = max(highest[0], int(positions.max()))
        return real_rope(self, positions)

    monkeypatch.setattr(Net, "rope", rope)
    scheduler = Scheduler(model)
    await scheduler.start()
    manager = Manager(tracks=model.spec.controls, new_id=lambda: "long", max_sessions=4)
    session = manager.create(max_pending_events=MAX_PENDING, prompt="a red room", seed=3)
    client = Client()
    options = Options(pacing="asap", format="rgb24", max_chunks_ahead=AHEAD)
    runner = Runner(session, manager, scheduler, client.send_text, client.send_bytes, options)
    client.runner = runner
    _notify_on_written(runner, client)
    runner.start()
    maxima: dict[str, int] = {}
    idle: dict[str, Totals] = {}
    try:
        reset_done = False
        while client.frames < FRAMES:
            await asyncio.sleep(0.001)
            _sample(runner, scheduler, model, manager, maxima)
            if client.frames >= 2000 and "first" not in idle:
                idle["first"] = await _idle_totals(runner, client)
            if client.frames >= FRAMES // 2 and not reset_done:
                await runner.reset()
                reset_done = True
        idle["last"] = await _idle_totals(runner, client)
    finally:
        await runner.close(is_sending=False)
        runner.abort_sending()
        await scheduler.stop()
    assert client.frames >= FRAMES
    assert highest[0] == tinyworld.SINK_FRAMES + tinyworld.WINDOW_FRAMES <= model.net.cfg.context_frames
    assert set(client.errors) == {"stale_event"}, client.errors  # nothing else went wrong
    pages = scheduler.pool.pages_per_session if scheduler.pool is not None else 0
    bounds = {
        "pending events": MAX_PENDING,
        "recent event ids (idempotency window)": MAX_PENDING,
        "timings of ticks in flight": 1,
        "queued messages": MAX_QUEUED_EVENTS,
        "runner tasks (sender, releases)": 2,
        "chunks committed, not yet written": AHEAD,
        "lead steps": STEP_WINDOW,
        "lead lateness": LATE_WINDOW,
        "scheduler sessions": 1,
        "scheduler tasks (loop, steps in flight)": 2,
        "workers busy": 1,
        "placed sessions": 1,
        "holders": 1,
        "KV pages held": pages,
        "model sessions": 1,
        "model-side pages": 0,
        "sessions": 1,
    }
    over = {name: (maxima[name], bound) for name, bound in bounds.items() if maxima[name] > bound}
    assert not over, over
    check_totals(idle["first"], idle["last"])


def _notify_on_written(runner: Runner, client: Client) -> None:
    """Call the client once each chunk is written, as a socket's reader would see it."""
    flow = runner.flow
    written = flow.written

    def on_written() -> None:
        written()
        asyncio.get_running_loop().call_soon(client.chunk_written)

    flow.written = on_written  # type: ignore[method-assign]


def _sample(
    runner: Runner, scheduler: Scheduler, model: Any, manager: Manager, maxima: dict[str, int]
) -> None:
    session, workers = runner.session, scheduler.workers
    held = model._sessions.get("long")
    sizes = {
        "pending events": session.pending_event_count,
        "recent event ids (idempotency window)": sum(len(q.recent) for q in session.roster.queues.values()),
        "timings of ticks in flight": len(runner._timings),
        "queued messages": len(runner.sender._outbox),
        "runner tasks (sender, releases)": len(runner._tasks),
        "chunks committed, not yet written": runner.flow.unsent,
        "lead steps": len(runner._lead.steps_s),
        "lead lateness": len(runner._lead.late_s),
        "scheduler sessions": scheduler.num_sessions,
        "scheduler tasks (loop, steps in flight)": len(scheduler._tasks),
        "workers busy": sum(1 for count in scheduler._busy.values() if count),
        "placed sessions": workers.num_sessions,
        "holders": len(workers._holders),
        "KV pages held": len(scheduler.pool.pages("long")) if scheduler.pool is not None else 0,
        "model sessions": model.num_sessions,
        "model-side pages": len(held.pages) if held is not None else 0,
        "sessions": len(manager),
    }
    for name, size in sizes.items():
        maxima[name] = max(maxima.get(name, 0), size)


async def _idle_totals(runner: Runner, client: Client) -> Totals:
    """Stop acking until the session has used its credit and sent everything, then count."""
    client.paused = True
    flow = runner.flow

    def is_idle() -> bool:
        return not (runner._ticking or flow.unsent or len(runner.sender._outbox) or runner._has_credit())

    await until(is_idle)
    await asyncio.sleep(0.05)
    counted = totals()
    client.paused = False
    for index in client.unacked:
        runner.ack(index, "start")
    client.unacked.clear()
    return counted


class _CommitFails(LastWriteWins):
    def commit(self, prepared: Any) -> None:
        raise RuntimeError("reducer commit failed")


async def test_chunks_that_fail_at_commit_leave_no_timings_behind() -> None:
    """A failed commit (here the reducer's; a wrong echo is the other) fails the chunk, and a reset
    goes on: the runner keeps no timing of it. Before, each one kept an entry for the session's life."""
    scheduler = Scheduler(ProceduralWorld())
    await scheduler.start()
    tracks = game.room_spec().controls
    ids = itertools.count()
    manager = Manager(tracks=tracks, new_id=lambda: f"f{next(ids)}", reducer_factory=_CommitFails)
    session = manager.create()
    sent: list[str] = []

    async def send_text(text: str) -> None:
        sent.append(text)

    async def send_bytes(data: bytes) -> None:
        pass

    runner = Runner(session, manager, scheduler, send_text, send_bytes, Options(pacing="asap"))
    runner.start()
    try:
        for _ in range(5):
            await until(lambda: session.status is Status.FAILED)
            await runner.reset()
        await until(lambda: session.status is Status.FAILED)
        assert sum('"chunk_failed"' in text for text in sent) >= 5
        assert runner._timings == {}
    finally:
        await runner.close(is_sending=False)
        runner.abort_sending()
        await scheduler.stop()
