"""The world core against the world promises of docs/architecture.md, as a Hypothesis state machine.

Rules are client events (new, duplicate and stale ids, overflow, poison controls
a reducer refuses, keys pressed and released and mouse motion, whose chunks
must see taps and summed motion), model outcomes (commit, a wrong echo, a failed step, a
cancellation right after commit, a reducer commit that fails) and lifecycle
(reset and close, with cleanup that works or fails). Illegal rules run too and
must raise the typed error with the state unchanged.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from livegen.errors import (
    CapacityExceeded,
    InvalidRequest,
    InvalidState,
    LocalProtocolError,
    ModelContractError,
    ModelError,
)
from livegen.models.controls import (
    CAMERA_SCHEMA,
    CAMERA_V1,
    KEYS_SCHEMA,
    KEYS_V1,
    MAX_KEYS_PER_EVENT,
    MAX_TAPS_PER_CHUNK,
    MOUSE_SCHEMA,
    MOUSE_V1,
)
from livegen.models.world import ControlTrack, TickMeta
from livegen.world import (
    AcceptStatus,
    ControlInput,
    Event,
    Failure,
    LastWriteWins,
    Manager,
    Output,
    Plan,
    Prepared,
    Rejection,
    Release,
    Session,
    Status,
)
from livegen.world.flow import FlowControl
from livegen.world.session import Transition

MODE = ControlTrack(
    name="mode",
    schema="test.mode.v1",
    json_schema={"type": "object", "properties": {"v": {"type": "string"}}, "required": ["v"]},
    default={"v": "idle"},
)
KEYS = ControlTrack("keys", KEYS_V1, KEYS_SCHEMA, {"down": [], "taps": []}, is_sticky=True)
MOUSE = ControlTrack("mouse", MOUSE_V1, MOUSE_SCHEMA, {"dx": 0, "dy": 0, "wheel": 0, "buttons": 0})
CAMERA = ControlTrack("camera", CAMERA_V1, CAMERA_SCHEMA, {"velocity": {}}, is_sticky=True)
MAX_PENDING = 4
#: The world's first frame: chunk 0 gets it, after every reset too, and no other chunk does.
SEED_IMAGE = np.zeros((2, 2, 3), np.uint8)
SID = "world-1"


class PickyReducer(LastWriteWins):
    """Last-write-wins that refuses the value 'poison' and can be told to fail its commit."""

    def __init__(self) -> None:
        self.is_commit_failing = False
        self.num_commits = 0

    def prepare(
        self, current: Mapping[str, ControlInput], events: Sequence[Event], chunk_index: int
    ) -> Prepared:
        if any(c.data.get("v") == "poison" for e in events for c in e.controls):
            raise ValueError("poison")
        return super().prepare(current, events, chunk_index)

    def commit(self, prepared: Prepared) -> None:
        if self.is_commit_failing:
            raise RuntimeError("reducer commit failed")
        self.num_commits += 1


def snapshot(session: Session) -> tuple[Any, ...]:
    return (
        session.status,
        session.chunk_index,
        session.pending_ids,
        session.committed_floor,
        session.event_floor,
        session.prompt,
        tuple(sorted(session.controls.items())),
        session.in_flight,
    )


class WorldMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        counter = itertools.count()
        self.reducer = PickyReducer()
        self.manager = Manager(
            tracks=[MODE, KEYS, MOUSE, CAMERA],
            new_id=lambda: str(next(counter)),
            max_sessions=1,
            reducer_factory=lambda: self.reducer,
        )
        self.session = self.manager.create(
            SID, max_pending_events=MAX_PENDING, prompt="start", seed_image=SEED_IMAGE
        )
        self.plan: Plan | None = None
        self.settled: Plan | None = None
        self.chunks_since_reset = 0
        self.all_applied: list[int] = []
        self.committed: list[str] = []
        self.delivered: list[str] = []
        self.released_reasons: list[str] = []
        self.refused: set[int] = set()
        self.next_id = 0
        self.seen_ids: list[int] = []
        #: Event id -> ("keys", keys down) or ("mouse", dx), for what each chunk must see.
        self.inputs: dict[int, tuple[str, Any]] = {}
        #: Event id -> transition_chunks, for every event that set a prompt.
        self.prompt_events: dict[int, int] = {}
        #: The committed transition the machine expects to go on, if any.
        self.transition: Transition | None = None

    # -- helpers ---------------------------------------------------------------------------
    def drain(self) -> None:
        for effect in self.session.take_effects():
            if isinstance(effect, Output):
                self.delivered.append(effect.meta.request_id)
            elif isinstance(effect, Release):
                self.released_reasons.append(effect.reason)
            elif isinstance(effect, Rejection):
                assert effect.error.code == "event_rejected"
                for event_id in effect.event_ids:
                    assert str(event_id) in effect.error.message
                self.refused.update(effect.event_ids)

    def unchanged_after(self, call: Any, error: type[Exception]) -> Exception:
        before = snapshot(self.session)
        with pytest.raises(error) as caught:
            call()
        assert snapshot(self.session) == before
        return caught.value

    # -- client events ---------------------------------------------------------------------
    @rule(gap=st.integers(1, 3), value=st.sampled_from(["a", "b", "poison"]), with_prompt=st.booleans())
    def new_event(self, gap: int, value: str, with_prompt: bool) -> None:
        self.drain()
        event_id = self.next_id + gap
        prompt = f"p{event_id}" if with_prompt else None
        event = Event.of(event_id, prompt, [ControlInput.of("mode", "test.mode.v1", {"v": value})])
        before = snapshot(self.session)
        accepting = self.session.status is Status.ACTIVE
        if not accepting:
            error = self.unchanged_after(lambda: self.session.accept(event), InvalidState)
            assert isinstance(error, InvalidState) and error.event_id == event_id
            return
        if self.session.pending_event_count >= MAX_PENDING:
            error = self.unchanged_after(lambda: self.session.accept(event), CapacityExceeded)
            assert error.code == "queue_full" and error.event_id == event_id
            return
        acceptance = self.session.accept(event)
        assert acceptance.status is AcceptStatus.ACCEPTED
        assert acceptance.pending_event_count == len(before[2]) + 1
        if with_prompt:
            self.prompt_events[event_id] = 0
        self.next_id = event_id
        self.seen_ids.append(event_id)

    def _input_event(
        self,
        gap: int,
        control: ControlInput,
        record: tuple[str, Any],
        prompt: str | None = None,
        chunks: int = 0,
    ) -> None:
        self.drain()
        event_id = self.next_id + gap
        event = Event.of(event_id, prompt, [control], transition_chunks=chunks)
        if self.session.status is not Status.ACTIVE:
            self.unchanged_after(lambda: self.session.accept(event), InvalidState)
            return
        if self.session.pending_event_count >= MAX_PENDING:
            self.unchanged_after(lambda: self.session.accept(event), CapacityExceeded)
            return
        assert self.session.accept(event).status is AcceptStatus.ACCEPTED
        self.next_id = event_id
        self.seen_ids.append(event_id)
        self.inputs[event_id] = record

    @rule(
        gap=st.integers(1, 2),
        down=st.lists(st.sampled_from(["KeyW", "KeyA", "Space"]), unique=True),
        first=st.integers(0, 150),
        count=st.sampled_from([0, 0, 1, 3, MAX_KEYS_PER_EVENT]),
    )
    def keys_event(self, gap: int, down: list[str], first: int, count: int) -> None:
        """Keys held, and taps (up to an event's bound; four such events pass a chunk's bound)."""
        taps = [f"T{first + i}" for i in range(count)]
        control = ControlInput.of("keys", KEYS_V1, {"down": down, "taps": taps} if taps else {"down": down})
        self._input_event(gap, control, ("keys", (tuple(down), tuple(taps))))

    @rule(gap=st.integers(1, 2), field=st.sampled_from(["down", "taps"]))
    def keys_event_over_bound(self, gap: int, field: str) -> None:
        """W9: an event naming more keys than an event may is refused whole, and changes nothing."""
        self.drain()
        if self.session.status is not Status.ACTIVE:
            return  # refused as the session's state says, whatever the event holds (other rules)
        codes = [f"K{i}" for i in range(MAX_KEYS_PER_EVENT + 1)]
        event = Event.of(self.next_id + gap, controls=[ControlInput.of("keys", KEYS_V1, {field: codes})])
        error = self.unchanged_after(lambda: self.session.accept(event), InvalidRequest)
        assert getattr(error, "code", None) == "invalid_event"

    @rule(gap=st.integers(1, 2), dx=st.integers(-5, 5))
    def mouse_event(self, gap: int, dx: int) -> None:
        self._input_event(gap, ControlInput.of("mouse", MOUSE_V1, {"dx": dx}), ("mouse", dx))

    @rule(gap=st.integers(1, 2), is_pose=st.booleans(), amount=st.integers(-3, 3))
    def camera_event(self, gap: int, is_pose: bool, amount: int) -> None:
        intrinsics = {"fx": 0.5, "fy": 0.5, "cx": 0.5, "cy": 0.5}
        pose = {"position": [amount, 0, 0], "rotation": [1, 0, 0, 0], "intrinsics": intrinsics}
        data = {"pose": pose} if is_pose else {"velocity": {"vz": amount, "yaw": 10 * amount}}
        control = ControlInput.of("camera", CAMERA_V1, data)
        self._input_event(gap, control, ("camera", control.data))

    @rule(
        data=st.sampled_from(
            [
                {},
                {"velocity": {}, "pose": {}},
                {"velocity": {"vz": 101}},
                {
                    "pose": {
                        "position": [0, 0, 0],
                        "rotation": [0, 0, 0, 0],
                        "intrinsics": {"fx": 1, "fy": 1, "cx": 0, "cy": 0},
                    }
                },
            ]
        )
    )
    def bad_camera(self, data: dict[str, Any]) -> None:
        """Neither or both of velocity and pose, out of range, a zero quaternion: refused on entry."""
        event = Event.of(self.next_id + 1, None, [ControlInput.of("camera", CAMERA_V1, data)])
        if self.session.status is Status.ACTIVE:
            error = self.unchanged_after(lambda: self.session.accept(event), InvalidRequest)
            assert error.code == "invalid_event" and "controls.camera.data" in str(error)

    @rule(gap=st.integers(1, 2), chunks=st.integers(0, 4))
    def transition_event(self, gap: int, chunks: int) -> None:
        """A new prompt that asks to blend in over ``chunks`` chunks."""
        event_id = self.next_id + gap
        control = ControlInput.of("mode", "test.mode.v1", {"v": "a"})
        self._input_event(gap, control, ("mode", "a"), f"t{event_id}", chunks)
        if self.next_id == event_id:  # accepted
            self.prompt_events[event_id] = chunks

    @rule(chunks=st.sampled_from([-1, 65, True, 2.0]), with_prompt=st.booleans())
    def bad_transition(self, chunks: Any, with_prompt: bool) -> None:
        """Out of range, not an integer, or no prompt to go to: refused before the session sees it."""
        with pytest.raises(InvalidRequest) as caught:
            Event.of(self.next_id + 1, "p" if with_prompt else None, transition_chunks=chunks)
        assert caught.value.code == "invalid_event" and caught.value.param == "transition_chunks"

    def check_transition(self, plan: Plan) -> None:
        """Step k of a transition over N chunks blends k/N; the chunk applying its event is step 1."""
        chunk = plan.meta.chunk_index
        prompts = [i for i in plan.meta.applied_event_ids if i in self.prompt_events]
        expected = self.transition
        if prompts:
            chunks = self.prompt_events[prompts[-1]]
            expected = Transition(prompts[-1], self.session.prompt, chunk, chunks) if chunks > 1 else None
        if expected is not None and expected.step(chunk) > expected.chunks:
            expected = None
        assert plan.transition == expected
        blend = plan.prompt_blend()
        if expected is None:
            assert blend is None
        else:
            assert blend is not None and blend.from_prompt == expected.from_prompt
            assert blend.weight == expected.step(chunk) / expected.chunks <= 1

    def check_inputs(self, plan: Plan) -> None:
        """A chunk sees its own events' motion summed, and a key pressed and released as a tap.

        The camera is a state: the chunk's is its last camera event's, else the one it inherits.
        """
        applied = [self.inputs[i] for i in plan.meta.applied_event_ids if i in self.inputs]
        cameras = [v for kind, v in applied if kind == "camera"]
        assert plan.controls["camera"].data == (
            cameras[-1] if cameras else self.session.controls["camera"].data
        )
        assert plan.controls["mouse"].data["dx"] == sum(v for kind, v in applied if kind == "mouse")
        pressed = [v for kind, v in applied if kind == "keys"]
        keys = plan.controls["keys"].data
        if pressed:
            held = set(pressed[-1][0])
            assert set(keys["down"]) == held
            # taps: codes tapped, or held by some event but not the last, the first distinct ones
            # in event order up to the chunk's bound
            codes = [code for down, taps in pressed for code in (*down, *taps) if code not in held]
            assert keys["taps"] == tuple(sorted(list(dict.fromkeys(codes))[:MAX_TAPS_PER_CHUNK]))
        else:
            assert keys["taps"] == ()

    @rule(data=st.data())
    def resend_event(self, data: st.DataObject) -> None:
        """A client retransmits an id it sent: duplicate (no change) or stale (typed error)."""
        self.drain()
        if not self.seen_ids or self.session.status is not Status.ACTIVE:
            return
        event_id = data.draw(st.sampled_from(self.seen_ids))
        event = Event.of(event_id, "again")
        before = snapshot(self.session)
        if event_id in self.session.pending_ids:
            assert self.session.accept(event).status is AcceptStatus.DUPLICATE
            assert snapshot(self.session) == before
        elif event_id <= self.session.event_floor:
            try:
                assert self.session.accept(event).status is AcceptStatus.DUPLICATE
            except InvalidState as error:
                assert error.code == "stale_event"
            assert snapshot(self.session) == before

    @rule()
    def bad_event(self) -> None:
        event = Event.of(self.next_id + 1, None, [ControlInput.of("nope", "x.v1", {})])
        error = self.unchanged_after(lambda: self.session.accept(event), (InvalidRequest, InvalidState))
        assert error.event_id == self.next_id + 1  # type: ignore[attr-defined]

    # -- ticks -----------------------------------------------------------------------------
    @rule()
    def begin_tick(self) -> None:
        self.drain()
        if self.session.status is not Status.ACTIVE or self.plan is not None:
            self.unchanged_after(self.session.begin_tick, LocalProtocolError)
            return
        pending = self.session.pending_ids
        self.plan = self.session.begin_tick()
        self.drain()
        applied = self.plan.meta.applied_event_ids
        assert set(applied) | self.refused >= set(pending)
        assert list(applied) == sorted(applied)
        assert self.plan.meta.chunk_index == self.session.chunk_index == self.chunks_since_reset
        for event_id in applied:
            assert self.session.event_floor >= event_id
        self.check_inputs(self.plan)
        self.check_transition(self.plan)
        assert (self.plan.seed_image is SEED_IMAGE) == (self.plan.meta.chunk_index == 0)

    def _commit(self) -> Output:
        assert self.plan is not None
        plan, self.plan = self.plan, None
        self.settled = plan
        out = self.session.commit_tick(plan, plan.meta, f"frames of {plan.meta.request_id}")
        self.transition = plan.transition
        header = out.prompt_transition()
        assert (header is None) == (plan.transition is None)
        if header is not None and plan.transition is not None:
            assert header["step"] == plan.transition.step(plan.meta.chunk_index) >= 1
            assert (
                header["last_chunk_index"] == plan.transition.first_chunk_index + plan.transition.chunks - 1
            )
        self.committed.append(plan.meta.request_id)
        self.chunks_since_reset += 1
        self.all_applied.extend(plan.meta.applied_event_ids)
        return out

    @precondition(lambda self: self.plan is not None)
    @rule()
    def commit(self) -> None:
        assert self.plan is not None
        if self.reducer.is_commit_failing:
            plan, self.plan = self.plan, None
            self.settled = plan
            chunk = self.session.chunk_index
            with pytest.raises(ModelError):
                self.session.commit_tick(plan, plan.meta, "frames")
            assert self.session.status is Status.FAILED and self.session.chunk_index == chunk
            return
        self._commit()
        self.drain()

    @precondition(lambda self: self.plan is not None and not self.reducer.is_commit_failing)
    @rule()
    def cancelled_during_commit(self) -> None:
        """The caller is cancelled right after commit: the return value is lost, the effect is not."""
        self._commit()

    @precondition(lambda self: self.plan is not None)
    @rule(how=st.sampled_from(["model_error", "wrong_echo", "state_evicted"]))
    def fail(self, how: str) -> None:
        assert self.plan is not None
        plan, self.plan = self.plan, None
        self.settled = plan
        chunk, pending = self.session.chunk_index, self.session.pending_ids
        if how == "wrong_echo":
            echo = TickMeta(SID, plan.meta.request_id, plan.meta.chunk_index + 1, plan.meta.applied_event_ids)
            with pytest.raises(ModelContractError):
                self.session.commit_tick(plan, echo, "frames")
        else:
            self.session.fail_tick(plan, how, "boom")
        effects = self.session.take_effects()
        assert any(isinstance(e, Release) for e in effects), "state must be released at once"
        assert any(isinstance(e, Failure) for e in effects)
        assert self.session.status is Status.FAILED
        assert self.session.chunk_index == chunk and self.session.pending_ids == pending
        assert self.session.event_floor == self.session.committed_floor

    @precondition(lambda self: self.settled is not None)
    @rule(how=st.sampled_from(["commit", "fail"]))
    def settle_a_settled_plan(self, how: str) -> None:
        """A late or repeated model answer for a chunk already settled changes nothing."""
        plan = self.settled
        assert plan is not None
        if how == "commit":
            self.unchanged_after(
                lambda: self.session.commit_tick(plan, plan.meta, "late"), LocalProtocolError
            )
        else:
            self.unchanged_after(lambda: self.session.fail_tick(plan, "late", "late"), LocalProtocolError)

    @rule()
    def toggle_reducer_commit_failure(self) -> None:
        self.reducer.is_commit_failing = not self.reducer.is_commit_failing

    # -- lifecycle -------------------------------------------------------------------------
    @rule(is_released=st.booleans())
    def reset(self, is_released: bool) -> None:
        self.drain()
        if self.plan is not None:
            self.unchanged_after(self.session.begin_reset, LocalProtocolError)
            return
        if self.session.status not in (Status.ACTIVE, Status.FAILED):
            self.unchanged_after(self.session.begin_reset, InvalidState)
            return
        pending = self.session.pending_ids
        self.session.begin_reset()
        assert self.session.status is Status.RESETTING
        self.session.finish_reset(is_released)
        self.drain()
        if is_released:
            assert self.session.status is Status.ACTIVE and self.session.chunk_index == 0
            assert self.session.prompt == "start" and self.session.pending_event_count == 0
            assert all(event_id <= self.session.committed_floor for event_id in pending)
            self.chunks_since_reset = 0
            self.transition = None
        else:
            assert self.session.status is Status.FAILED

    @rule(is_released=st.booleans())
    def close(self, is_released: bool) -> None:
        self.drain()
        if self.plan is not None:
            self.unchanged_after(self.session.begin_close, LocalProtocolError)
            return
        if not self.session.begin_close():
            return
        self.manager.finish_close(SID, is_released)
        self.drain()
        if is_released:
            assert SID not in self.manager
            assert self.session.status is Status.CLOSED
        else:
            assert self.manager.tombstones == [SID]
            with pytest.raises(InvalidState) as error:
                self.manager.create(SID)
            assert error.value.code == "session_cleanup_pending"

    @precondition(lambda self: self.session.status is Status.CLOSED)
    @rule()
    def reopen(self) -> None:
        """A closed world's id may be reused; the client's ids start over with the new world."""
        self.reducer = PickyReducer()
        self.session = self.manager.create(
            SID, max_pending_events=MAX_PENDING, prompt="start", seed_image=SEED_IMAGE
        )
        self.chunks_since_reset = 0
        self.seen_ids, self.next_id, self.all_applied = [], 0, []
        self.inputs, self.prompt_events, self.transition = {}, {}, None

    # -- the promises (invariants named after docs/architecture.md's numbers) ---------------
    @invariant()
    def w1_identities(self) -> None:
        """W1 and W3: chunk indices contiguous since reset; each event applied once, in id
        order; request ids unique."""
        assert self.session.chunk_index == self.chunks_since_reset
        assert len(self.all_applied) == len(set(self.all_applied)), "an event applied twice"
        assert self.all_applied == sorted(self.all_applied), "event ids not monotonic across chunks"
        assert len(self.committed) == len(set(self.committed)), "request ids must be unique"

    @invariant()
    def w2_bounded_queue_above_floor(self) -> None:
        """W2: the pending queue is bounded, above the floor, and holds nothing already applied."""
        assert self.session.pending_event_count <= MAX_PENDING
        assert all(event_id > self.session.committed_floor for event_id in self.session.pending_ids)
        assert not set(self.session.pending_ids) & set(self.all_applied)

    @invariant()
    def w5_no_committed_output_is_lost(self) -> None:
        """W5: every committed chunk's output is delivered or queued, even when the caller was
        cancelled during commit."""
        queued = [e.meta.request_id for e in self.session._effects if isinstance(e, Output)]
        assert sorted(self.delivered + queued) == sorted(self.committed)

    @invariant()
    def w4_failed_means_released(self) -> None:
        """W4: a failed session holds no chunk in flight (its state was released at once)."""
        if self.session.status is Status.FAILED:
            assert self.session.in_flight is None


TestWorldMachine = WorldMachine.TestCase
TestWorldMachine.settings = settings(stateful_step_count=50, deadline=None)


class FlowMachine(RuleBasedStateMachine):
    """Flow control (``world/flow.py``) with a session's chunks: generate, write, ack at start or
    end, reset, change ``max_chunks_ahead``. Promises: nothing is generated beyond the credit
    (``max_chunks_ahead`` past the last ack), an ack counts only for chunks already written, a
    start ack frees the same credit as an end ack (so with one chunk ahead the next chunk is
    generated while this one plays), and reset starts the credit over."""

    def __init__(self) -> None:
        super().__init__()
        self.flow = FlowControl()
        self.next_index = 0
        self.max_ahead = 1
        self.epoch = 0
        #: Committed chunks not yet written, in order: (epoch, chunk index).
        self.unsent: list[tuple[int, int]] = []
        self.written_through = -1  # in this epoch
        #: The highest index acked in this epoch, by the client's own count.
        self.client_acked = -1

    @precondition(lambda self: self.flow.has_credit(self.next_index, self.max_ahead))
    @rule()
    def generate(self) -> None:
        self.flow.committed()
        self.unsent.append((self.epoch, self.next_index))
        self.next_index += 1

    @precondition(lambda self: bool(self.unsent))
    @rule()
    def write(self) -> None:
        epoch, index = self.unsent.pop(0)
        self.flow.written()
        if epoch == self.epoch:
            self.written_through = index

    @rule(offset=st.integers(-2, 3), at=st.sampled_from(["start", "end"]))
    def ack(self, offset: int, at: str) -> None:
        index = max(0, self.written_through + offset)  # acks of unsent chunks too: they must not count
        before = self.flow.acked_through
        moved = self.flow.ack(index, self.next_index, at, now=float(index))
        assert moved == (self.flow.acked_through > before)
        assert self.flow.acked_through == max(before, min(index, self.written_through))
        if moved and at == "start":
            assert self.flow.last_start == (self.flow.acked_through, float(index))
        self.client_acked = max(self.client_acked, index)

    @rule(at=st.sampled_from(["start", "end"]))
    def ack_while_playing_one_ahead(self, at: str) -> None:
        """The page at one chunk ahead: it acks what it shows; a start ack opens the next chunk."""
        if self.max_ahead != 1 or self.written_through < 0 or self.unsent:
            return
        self.flow.ack(self.written_through, self.next_index, at)
        assert self.flow.has_credit(self.next_index, 1) == (self.written_through == self.next_index - 1)

    @rule(max_ahead=st.integers(1, 3))
    def change_ahead(self, max_ahead: int) -> None:
        self.max_ahead = max_ahead

    @rule()
    def reset(self) -> None:
        self.flow.reset()
        self.epoch += 1
        self.next_index = 0
        self.written_through = self.client_acked = -1

    @rule()
    def bad_ack(self) -> None:
        with pytest.raises(ValueError):
            self.flow.ack(0, self.next_index, "middle")

    @invariant()
    def w7_acks_count_only_written_chunks(self) -> None:
        """W7: an ack counts only for chunks already written."""
        assert self.flow.acked_through <= self.written_through

    @invariant()
    def w7_nothing_beyond_credit(self) -> None:
        """W7: nothing is generated beyond max_chunks_ahead past the last ack."""
        # Generated past the last ack: at most the most max_chunks_ahead ever was (it may shrink).
        assert self.next_index - 1 - self.flow.acked_through <= 3
        assert self.flow.unsent == len(self.unsent)


TestFlowMachine = FlowMachine.TestCase
TestFlowMachine.settings = settings(stateful_step_count=50, deadline=None)
