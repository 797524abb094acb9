"""A voice session's lifecycle (``voice/lifecycle.py``), one table row per transition.

As h11's ``test_state.py`` does for its connection states: every (state, event)
pair, the refused ones included, against ``TRANSITIONS``, written out here and
not derived from the code; then what the table must guarantee (every state can
end, every end lets its links go, a parked session always leaves the parked
set); then the session owner (``runtime/voice/owner.py``) walking the table,
one path per way a session can go, with test-double links and the real engine,
runner and core. Promise V8 (docs/architecture.md): a session outlives a lost
link for the grace period, a resume takes it over, the parked budget is its own.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from livegen.errors import LocalProtocolError
from livegen.models.registry import ServedNames
from livegen.runtime.voice import owner as owner_module
from livegen.runtime.voice.engine import VoiceEngine
from livegen.runtime.voice.lifecycle import Handoff, Opening
from livegen.server.config import ServerConfig
from livegen.server.metrics import Metrics
from livegen.voice.lifecycle import TRANSITIONS, WAITING, Action, Event, State, transition
from voice.scripted import registry

OP, L, X, P, R, E = State.OPENING, State.LIVE, State.LOST, State.PARKED, State.RESUMING, State.ENDED
A = Action
REFUSED = LocalProtocolError

#: (state, event) -> (next state, actions), or the error. Every pair not listed is refused.
ALLOWED: dict[tuple[State, Event], tuple[State, tuple[Action, ...]]] = {
    # OPENING's step: the runner is made, or the model could not open a stream
    (OP, Event.OPENED): (L, (A.START,)),
    (OP, Event.OPEN_FAILED): (E, (A.REFUSE,)),
    # LIVE: the client leaves, the runner ends, the link is lost, or a resume takes over
    (L, Event.GOODBYE): (E, (A.END,)),
    (L, Event.RUNNER_ENDED): (E, (A.END,)),
    (L, Event.LINK_LOST): (X, (A.RETIRE,)),
    (L, Event.HANDOFF): (R, (A.REPLACE,)),
    # LOST's step: the parked budget has room, or not
    (X, Event.MAY_PARK): (P, (A.PARK,)),
    (X, Event.NO_PARK): (E, (A.END,)),
    # PARKED: a resume, or the end (grace, eviction, the runner)
    (P, Event.HANDOFF): (R, (A.UNPARK,)),
    (P, Event.GRACE_EXPIRED): (E, (A.UNPARK, A.END)),
    (P, Event.EVICTED): (E, (A.UNPARK, A.END)),
    (P, Event.RUNNER_ENDED): (E, (A.UNPARK, A.END)),
    # RESUMING's step: the resuming link is live, or the session is lost again
    (R, Event.RESUMED): (L, (A.ATTACH,)),
    (R, Event.RESUME_FAILED): (X, (A.REJECT,)),
}

#: Each busy state's step can only give these events; the waiting states get news from outside.
STEP_OUTCOMES = {
    OP: {Event.OPENED, Event.OPEN_FAILED},
    X: {Event.MAY_PARK, Event.NO_PARK},
    R: {Event.RESUMED, Event.RESUME_FAILED},
}
#: What happens from outside: a link, the runner, a resume, the clock, the parked budget.
OUTSIDE = {
    Event.GOODBYE,
    Event.LINK_LOST,
    Event.RUNNER_ENDED,
    Event.HANDOFF,
    Event.GRACE_EXPIRED,
    Event.EVICTED,
}


def every_pair() -> Iterator[tuple[State, Event]]:
    for state in State:
        for event in Event:
            yield state, event


@pytest.mark.parametrize(("state", "event"), list(every_pair()), ids=lambda v: str(v))
def test_every_pair_moves_as_the_table_says_or_is_refused(state: State, event: Event) -> None:
    if (state, event) in ALLOWED:
        assert transition(state, event) == ALLOWED[state, event]
    else:
        with pytest.raises(REFUSED, match=f"{state}.*{event}"):
            transition(state, event)


def test_the_module_table_is_this_table() -> None:
    assert TRANSITIONS == ALLOWED


def test_busy_states_take_only_their_steps_outcomes_and_waiting_states_only_news() -> None:
    for state in State:
        taken = {event for (s, event) in ALLOWED if s is state}
        if state in WAITING:
            assert taken <= OUTSIDE, state
        elif state is not E:
            assert taken == STEP_OUTCOMES[state], state
    assert {L, P} == WAITING and not any(s is E for s, _ in ALLOWED), "ENDED is final"


def test_every_state_can_end_and_every_end_lets_its_links_go() -> None:
    reaches_end = {E}
    while True:  # the states from which some path reaches ENDED
        more = {s for (s, _), (after, _) in ALLOWED.items() if after in reaches_end} - reaches_end
        if not more:
            break
        reaches_end |= more
    assert reaches_end == set(State)
    for (state, _), (after, actions) in ALLOWED.items():
        if after is E:  # END (or REFUSE, before there is a runner) closes and releases the links
            assert actions[-1] is (A.REFUSE if state is OP else A.END), state


def test_a_session_that_leaves_parked_leaves_the_parked_set_first() -> None:
    for (state, _), (after, actions) in ALLOWED.items():
        assert (A.PARK in actions) == (after is P and state is not P)
        if state is P:
            assert actions[0] is A.UNPARK
    # news from outside that a waiting state cannot have arrives only in those states
    assert {e for s, e in ALLOWED if s is L} == OUTSIDE - {Event.GRACE_EXPIRED, Event.EVICTED}
    assert {e for s, e in ALLOWED if s is P} == OUTSIDE - {Event.GOODBYE, Event.LINK_LOST}


# -- the owner walks the table ------------------------------------------------------------

SESSION_ID = "sess_00112233aabbccdd"


class FakeLink:
    """A client link: records what the session writes; ``inbox`` feeds texts or a close code."""

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


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[tuple[State, Event]]]:
    """Every (state, event) each session's owner looked up, by session id (its task's name says
    it), in order."""
    seen: dict[str, list[tuple[State, Event]]] = {}

    def spy(state: State, event: Event) -> tuple[State, tuple[Action, ...]]:
        task = asyncio.current_task()
        assert task is not None
        seen.setdefault(task.get_name().removeprefix("voice-session-"), []).append((state, event))
        return transition(state, event)

    monkeypatch.setattr(owner_module, "transition", spy)
    return seen


async def started(**config: Any) -> VoiceEngine:
    models = registry()
    engine = VoiceEngine(models, ServedNames(models, "scripted-voice"), ServerConfig(**config), Metrics())
    await engine.start()
    return engine


@pytest.fixture
async def engine() -> AsyncIterator[VoiceEngine]:
    engine = await started(resume_grace_s=30.0)
    yield engine
    await engine.stop()


async def open_session(engine: VoiceEngine, link: FakeLink, session_id: str = SESSION_ID) -> Handoff:
    name, model = await engine.admit("scripted-voice")
    opening = Opening(Handoff(link), session_id, name, model)
    engine.open(opening)
    await until(lambda: "session.created" in link.types())
    return opening.handoff


async def park(engine: VoiceEngine, link: FakeLink, session_id: str = SESSION_ID) -> None:
    link.inbox.put_nowait(1006)  # lost, not a goodbye
    await until(lambda: session_id in engine.parked)


async def resume(engine: VoiceEngine, token: str, last_seq: int) -> tuple[FakeLink, asyncio.Task[None]]:
    link = FakeLink()
    handing = asyncio.create_task(engine.hand_over(Handoff(link, last_seq=last_seq), SESSION_ID, token))
    await until(lambda: bool(link.sent))
    return link, handing


async def ended(engine: VoiceEngine) -> None:
    await until(lambda: not engine.owners)


OPENED, GOODBYE = (OP, Event.OPENED), (L, Event.GOODBYE)
LOST_PARKED = [(L, Event.LINK_LOST), (X, Event.MAY_PARK)]


async def test_open_then_goodbye(engine: VoiceEngine, walks: dict[str, list[Any]]) -> None:
    link = FakeLink()
    await open_session(engine, link)
    link.inbox.put_nowait(1001)
    await ended(engine)
    assert walks[SESSION_ID] == [OPENED, GOODBYE] and link.closed == 1000


async def test_lost_parked_resumed_then_goodbye(engine: VoiceEngine, walks: dict[str, list[Any]]) -> None:
    first = FakeLink()
    await open_session(engine, first)
    await park(engine, first)
    second, handing = await resume(engine, first.sent[0]["resume_token"], len(first.sent))
    assert second.types() == ["session.resumed"] and engine.live[SESSION_ID].attached is not None
    second.inbox.put_nowait(1000)
    await asyncio.wait_for(handing, 10)
    await ended(engine)
    resumed = [(P, Event.HANDOFF), (R, Event.RESUMED)]
    assert walks[SESSION_ID] == [OPENED, *LOST_PARKED, *resumed, GOODBYE]
    assert (first.closed, second.closed) == (1000, 1000)


async def test_a_resume_of_a_live_link_replaces_it(engine: VoiceEngine, walks: dict[str, list[Any]]) -> None:
    first = FakeLink()
    await open_session(engine, first)
    second, handing = await resume(engine, first.sent[0]["resume_token"], len(first.sent))
    await until(lambda: first.closed is not None)
    second.inbox.put_nowait(1000)
    await asyncio.wait_for(handing, 10)
    await ended(engine)
    assert walks[SESSION_ID] == [OPENED, (L, Event.HANDOFF), (R, Event.RESUMED), GOODBYE]
    assert first.closed == 4001 and second.closed == 1000


async def test_a_failed_resume_parks_the_session_again(
    engine: VoiceEngine, walks: dict[str, list[Any]]
) -> None:
    first = FakeLink()
    await open_session(engine, first)
    await park(engine, first)
    token = first.sent[0]["resume_token"]
    refused, handing = await resume(engine, token, len(first.sent) + 5)  # a seq never sent
    await asyncio.wait_for(handing, 10)
    assert refused.types() == ["error"] and refused.closed == 1008
    await until(lambda: SESSION_ID in engine.parked)
    second, handing = await resume(engine, token, len(first.sent))  # the token was given back
    second.inbox.put_nowait(1000)
    await asyncio.wait_for(handing, 10)
    await ended(engine)
    failed = [(P, Event.HANDOFF), (R, Event.RESUME_FAILED), (X, Event.MAY_PARK)]
    resumed = [(P, Event.HANDOFF), (R, Event.RESUMED)]
    assert walks[SESSION_ID] == [OPENED, *LOST_PARKED, *failed, *resumed, GOODBYE]


async def test_a_parked_session_ends_when_its_grace_expires(walks: dict[str, list[Any]]) -> None:
    engine = await started(resume_grace_s=0.2)
    try:
        link = FakeLink()
        await open_session(engine, link)
        link.inbox.put_nowait(1006)
        await ended(engine)
        assert walks[SESSION_ID] == [OPENED, *LOST_PARKED, (P, Event.GRACE_EXPIRED)]
        assert not engine.live and not engine.parked and not engine.runners
    finally:
        await engine.stop()


async def test_without_a_grace_period_a_lost_link_ends_the_session(walks: dict[str, list[Any]]) -> None:
    engine = await started(resume_grace_s=0.0)
    try:
        link = FakeLink()
        await open_session(engine, link)
        link.inbox.put_nowait(1006)
        await ended(engine)
        assert walks[SESSION_ID] == [OPENED, (L, Event.LINK_LOST), (X, Event.NO_PARK)]
    finally:
        await engine.stop()


async def test_the_oldest_parked_session_is_evicted_for_a_newer_one(walks: dict[str, list[Any]]) -> None:
    engine = await started(resume_grace_s=30.0, max_parked_sessions=1)
    try:
        old, new = FakeLink(), FakeLink()
        await open_session(engine, old, "sess_0000000000000001")
        await park(engine, old, "sess_0000000000000001")
        await open_session(engine, new, "sess_0000000000000002")
        await park(engine, new, "sess_0000000000000002")
        await until(lambda: "sess_0000000000000001" not in engine.live)
        assert walks["sess_0000000000000001"] == [OPENED, *LOST_PARKED, (P, Event.EVICTED)]
        assert list(engine.parked) == ["sess_0000000000000002"]
    finally:
        await engine.stop()
    assert walks["sess_0000000000000002"] == [OPENED, *LOST_PARKED, (P, Event.RUNNER_ENDED)]


async def test_a_server_shutdown_ends_a_live_session_through_its_runner(walks: dict[str, list[Any]]) -> None:
    engine = await started()
    link = FakeLink()
    await open_session(engine, link)
    await engine.stop()
    await ended(engine)
    assert walks[SESSION_ID] == [OPENED, (L, Event.RUNNER_ENDED)]
    assert link.types()[-1] == "session.closed" and link.closed == 1000


async def test_a_model_that_cannot_open_a_stream_refuses_the_session(
    engine: VoiceEngine, walks: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(session_id: str, config: Any) -> Any:
        raise RuntimeError("no stream today")

    monkeypatch.setattr(engine.models["scripted-voice"], "open", broken)
    link = FakeLink()
    name, model = await engine.admit("scripted-voice")
    opening = Opening(Handoff(link), SESSION_ID, name, model)
    engine.open(opening)
    await asyncio.wait_for(opening.handoff.released.wait(), 10)
    await ended(engine)
    assert walks[SESSION_ID] == [(OP, Event.OPEN_FAILED)]
    assert link.types() == ["error"] and link.sent[0]["error"]["code"] == "model_error"
    assert link.closed == 1011 and not engine.live and not engine.runners


def test_the_owner_has_a_step_for_every_live_state_and_a_method_for_every_action() -> None:
    steps = {state: getattr(owner_module.SessionOwner, name) for state, name in owner_module._STEPS.items()}
    assert set(steps) == set(State) - {E}
    assert all(callable(getattr(owner_module.SessionOwner, owner_module._ACTIONS[a])) for a in Action)


async def test_a_link_that_raises_ends_its_session_with_its_terminal(
    engine: VoiceEngine, walks: dict[str, list[Any]], caplog: pytest.LogCaptureFixture
) -> None:
    """A reader that raises is a bug of ours or the transport's: the session ends, its runner
    still sends ``session.closed`` (the reader runs in the owner's task group, where an
    exception would cancel the runner first), the link is closed and the failure is logged."""

    class BrokenLink(FakeLink):
        async def receive(self) -> str | int:
            message = await self.inbox.get()
            if message == "boom":
                raise RuntimeError("the transport broke")
            return message

    link = BrokenLink()
    await open_session(engine, link)
    link.inbox.put_nowait("boom")
    await ended(engine)
    assert link.types()[-1] == "session.closed" and link.closed == 1000
    assert not engine.live and not engine.runners
    assert walks[SESSION_ID] == [OPENED]
    assert any("voice.owner_failed" in record.getMessage() for record in caplog.records)
