"""The voice engine's lifecycle, without a transport: attached -> parked -> attached or ended.

The links are test doubles (``Link`` is the engine's whole view of a socket);
the model is the scripted voice model, and the engine, runner and session core
are the real ones. The same steps over real sockets are in
``tests/server/test_voice_resume.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from livegen.models.registry import ServedNames
from livegen.runtime.voice.engine import VoiceEngine
from livegen.runtime.voice.lifecycle import Handoff, Opening
from livegen.server.config import ServerConfig
from livegen.server.metrics import Metrics
from voice.scripted import registry

SESSION_ID = "sess_00112233aabbccdd"


class FakeLink:
    """A client link: records what the engine writes; ``inbox`` feeds texts or a close code."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.inbox: asyncio.Queue[str | int] = asyncio.Queue()
        self.closed: int | None = None

    async def send_text(self, text: str) -> None:
        self.sent.append(json.loads(text))

    async def close(self, code: int) -> None:
        self.closed = code

    async def receive(self) -> str | int:
        return await self.inbox.get()

    def types(self) -> list[str]:
        return [event["type"] for event in self.sent]


async def until(condition: Any, timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():  # noqa: ASYNC110 - polls state that several tasks change
            await asyncio.sleep(0.01)


def engine_with(**config: Any) -> VoiceEngine:
    models = registry()
    return VoiceEngine(models, ServedNames(models, "scripted-voice"), ServerConfig(**config), Metrics())


@pytest.fixture
async def engine() -> AsyncIterator[VoiceEngine]:
    engine = engine_with(resume_grace_s=30.0)
    await engine.start()
    yield engine
    await engine.stop()


async def open_session(engine: VoiceEngine, link: FakeLink) -> Handoff:
    name, model = await engine.admit("scripted-voice")
    opening = Opening(Handoff(link), SESSION_ID, name, model)
    engine.open(opening)
    await until(lambda: "session.created" in link.types())
    return opening.handoff


async def test_a_lost_link_parks_the_session_and_a_resume_attaches_it_again(engine: VoiceEngine) -> None:
    first = FakeLink()
    opened = await open_session(engine, first)
    token = first.sent[0]["resume_token"]
    assert engine.live[SESSION_ID].attached is opened and not engine.parked
    first.inbox.put_nowait(1006)  # lost, not a goodbye
    await until(lambda: SESSION_ID in engine.parked)
    assert engine.live[SESSION_ID].attached is None and first.closed == 1000 and opened.released.is_set()
    assert engine.health()["parked_sessions"] == 1 and engine.health()["live_sessions"] == 0

    second = FakeLink()
    handoff = Handoff(second, last_seq=len(first.sent))
    resuming = asyncio.create_task(engine.hand_over(handoff, SESSION_ID, token))
    await until(lambda: "session.resumed" in second.types())
    assert not engine.parked and engine.live[SESSION_ID].attached is handoff
    assert not resuming.done(), "the resuming handler waits while its link is attached"

    second.inbox.put_nowait(1000)  # the client says goodbye: the session ends
    await asyncio.wait_for(resuming, 10)
    assert second.closed == 1000 and not engine.live and not engine.runners


async def test_a_parked_session_ends_when_its_grace_expires() -> None:
    engine = engine_with(resume_grace_s=0.2)
    await engine.start()
    try:
        link = FakeLink()
        await open_session(engine, link)
        link.inbox.put_nowait(1006)
        await until(lambda: not engine.live)
        assert not engine.parked and not engine.runners and not engine.owners
    finally:
        await engine.stop()


async def test_a_resume_with_a_wrong_token_is_refused_and_the_session_stays_parked(
    engine: VoiceEngine,
) -> None:
    first = FakeLink()
    await open_session(engine, first)
    first.inbox.put_nowait(1006)
    await until(lambda: SESSION_ID in engine.parked)
    intruder = FakeLink()
    await asyncio.wait_for(engine.hand_over(Handoff(intruder), SESSION_ID, "not-the-token"), 10)
    assert intruder.types() == ["error"] and intruder.sent[0]["error"]["code"] == "invalid_resume_token"
    assert intruder.closed == 1008 and SESSION_ID in engine.parked


async def test_a_clean_goodbye_ends_the_session_without_parking(engine: VoiceEngine) -> None:
    link = FakeLink()
    opened = await open_session(engine, link)
    link.inbox.put_nowait(1000)
    await asyncio.wait_for(opened.released.wait(), 10)
    assert link.closed == 1000 and not engine.live and not engine.parked and not engine.runners


def test_sent_events_and_errors_are_counted_by_their_own_labels() -> None:
    """The engine keeps its labelled counters (a lookup per event was on the hot path): each
    error code still counts under its own label, and every sent event counts as out."""
    from livegen.protocol.realtime import server as ev

    engine = engine_with()
    for code in ("invalid_json", "invalid_json", "unknown_event_type"):
        engine._on_sent(ev.Error(error={"type": "invalid_request_error", "code": code, "message": "m"}))
    engine._on_sent(ev.InputAudioBufferCleared())
    metrics = engine.metrics.render().decode()
    assert 'livegen_errors_total{code="invalid_json",kind="voice"} 2.0' in metrics
    assert 'livegen_errors_total{code="unknown_event_type",kind="voice"} 1.0' in metrics
    assert 'livegen_events_total{direction="out",kind="voice"} 4.0' in metrics


async def test_stop_ends_live_and_parked_sessions_and_leaves_no_task_behind() -> None:
    engine = engine_with(resume_grace_s=30.0)
    await engine.start()
    parked, live = FakeLink(), FakeLink()
    await open_session(engine, parked)
    parked.inbox.put_nowait(1006)  # lost: the session waits for a resume
    await until(lambda: SESSION_ID in engine.parked)
    name, model = await engine.admit("scripted-voice")
    engine.open(Opening(Handoff(live), "sess_live", name, model))
    await until(lambda: "session.created" in live.types())
    await engine.stop()
    assert not engine.owners and not engine.live and not engine.parked
    assert live.types()[-1] == "session.closed" and live.closed == 1000
    # The owners, their runners and every runner's chain, sender and pump were awaited.
    assert {task for task in asyncio.all_tasks() if task is not asyncio.current_task()} == set()


class StuckLink(FakeLink):
    """A resuming client that never reads: every write blocks (until the engine gives up on it)."""

    async def send_text(self, text: str) -> None:
        await asyncio.Event().wait()


async def test_stop_cancels_a_resume_stuck_on_a_client_that_never_reads() -> None:
    """The engine's stop used to wait 5 s for the session's owner and return with it still
    running (blocked in the replay to the new link), its resume's handler waiting forever."""
    engine = engine_with(resume_grace_s=30.0)
    await engine.start()
    first = FakeLink()
    await open_session(engine, first)
    token = first.sent[0]["resume_token"]
    first.inbox.put_nowait(1006)
    await until(lambda: SESSION_ID in engine.parked)
    stuck = StuckLink()
    resuming = asyncio.create_task(engine.hand_over(Handoff(stuck, last_seq=0), SESSION_ID, token))
    await until(lambda: SESSION_ID not in engine.parked)  # the owner is in the take-over, blocked
    await engine.stop()
    async with asyncio.timeout(5):
        await resuming  # its handler was let go
    assert stuck.closed == 1001 and not engine.owners
    assert {task for task in asyncio.all_tasks() if task is not asyncio.current_task()} == set()
