"""The voice core against the voice promises of docs/architecture.md, as a Hypothesis state machine.

Rules are client events, model outputs (of the current and of stale epochs),
append-chain outcomes (success, failure) and the clock; the test plays the
runtime's part by running the chain in order. Illegal rules still run: they
must raise the typed error and leave the session unchanged.
"""

from __future__ import annotations

import base64
import itertools
from collections import Counter, deque
from typing import Any

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from livegen.errors import InvalidRequest, RemoteProtocolError
from livegen.models.voice import OutputKind, VoiceOutput
from livegen.protocol import realtime as wire
from livegen.voice.chain import (
    INPUT_KINDS,
    Attempt,
    AttemptKind,
    Closed,
    Outcome,
    ResumeChain,
    Run,
    Send,
    SwitchModel,
)
from livegen.voice.conversation import MAX_HISTORY_CHARS, MAX_ITEMS
from livegen.voice.session import Limits, ModelFacts, Session
from voice.drive import drive

RATE = 8_000


def pcm(ms: int, loud: bool) -> bytes:
    samples = np.arange(RATE * ms // 1000)
    wave = (np.sin(samples * 0.3) * (8000 if loud else 0)).astype("<i2")
    return wave.tobytes()


def append(ms: int, loud: bool) -> wire.AudioAppend:
    return wire.AudioAppend(audio=base64.b64encode(pcm(ms, loud)).decode(), event_id="evt_append")


TURN_ITEM_EVENTS = ("input_audio_buffer.speech_started", "input_audio_buffer.committed")


class VoiceCore(RuleBasedStateMachine):
    @initialize(has_vad=st.booleans(), server_vad=st.booleans())
    def open(self, has_vad: bool, server_vad: bool) -> None:
        counter = itertools.count()
        self.session = Session(
            "sess_1",
            ModelFacts("scripted", RATE, RATE, has_vad),
            ids=lambda prefix: f"{prefix}_{next(counter)}",
            # A tight input rate bound (1 s bursts at 2x real time), so that floods are refused
            # amid everything else, and a refusal must leave the session as it was.
            limits=Limits(
                max_input_bytes=4000,
                max_pending_commits=2,
                lead_ms=40,
                input_rate_factor=2.0,
                input_burst_ms=1000.0,
            ),
        )
        self.now = 0.0
        self.chain: deque[Attempt] = deque()
        self.is_chain_blocked = False
        self.sent: list[dict[str, Any]] = []
        self.is_terminal_sent = False
        self.last_epoch = 0
        self.pending_switch: SwitchModel | None = None
        #: Items of answers that have finished playing (all audio due at real time, response over).
        self.finished: set[str] = set()
        self.is_client_truncate = False
        self.apply(drive(self.session.open, self.now))
        fmt = {"type": "audio/pcm", "rate": RATE}
        vad = {"type": "server_vad", "silence_duration_ms": 30} if server_vad else None
        update = {"audio": {"input": {"format": fmt, "turn_detection": vad}, "output": {"format": fmt}}}
        self.apply(drive(self.session.receive, wire.session_update(update), self.now))

    # --- plumbing --------------------------------------------------------------------

    def apply(self, effects: list[Any]) -> list[Any]:
        for effect in effects:
            if isinstance(effect, Send):
                assert not self.is_terminal_sent, f"{effect.type} sent after the terminal event"
                if effect.type == "conversation.item.truncated" and not self.is_client_truncate:
                    assert effect.as_dict()["item_id"] not in self.finished, "a finished answer was cut"
                self.sent.append(effect.as_dict())
                if effect.type == "session.closed":
                    self.is_terminal_sent = True
            elif isinstance(effect, Run):
                self.chain.append(effect.attempt)
            elif isinstance(effect, ResumeChain):
                self.is_chain_blocked = False
            elif isinstance(effect, SwitchModel):
                self.pending_switch = effect
            elif isinstance(effect, Closed):
                assert self.is_terminal_sent
        return effects

    def snapshot(self) -> tuple[Any, ...]:
        s = self.session
        return (
            s.epoch,
            s.ledger.pending_bytes,
            len(s.attempts),
            s.buffer_bytes,
            None if s.response is None else s.response.id,
            len(s.conversation),
            s.config,
            s.phase,
            tuple(sorted(s.calls.counts().items())),
        )

    def client(self, event: wire.ClientEvent) -> None:
        before = self.snapshot()
        try:
            self.apply(drive(self.session.receive, event, self.now))
        except RemoteProtocolError as error:
            assert error.code and error.message
            assert self.snapshot() == before, "a refused event changed the session"
            assert self.session.take_effects() == [], "a refused event queued effects"
            if event.event_id is not None:
                assert error.event_id == event.event_id
            self.apply(drive(self.session.reject, error))

    def model(self, output: VoiceOutput) -> None:
        is_stale = output.epoch < self.session.epoch
        num_sent = len(self.sent)
        self.apply(drive(self.session.on_output, output, self.now))
        if is_stale:
            assert len(self.sent) == num_sent, "stale-epoch output reached the client"

    # --- client rules ----------------------------------------------------------------

    @rule(ms=st.sampled_from([10, 20, 40, 100, 300]), loud=st.booleans())
    def append_audio(self, ms: int, loud: bool) -> None:
        self.client(append(ms, loud))

    @rule(ms=st.sampled_from([600, 1200]))
    def flood_append(self, ms: int) -> None:
        """More audio at once than the rate bound may take now: refused, and nothing of it kept."""
        self.client(append(ms, True))

    @rule()
    def spoken_turn(self) -> None:
        """Speech then silence: under server VAD, a turn that commits itself (and may barge in)."""
        self.client(append(100, True))
        self.client(append(100, False))

    @rule(audio=st.sampled_from(["not base64!", "QUJD", "AAA="]))
    def append_bad_audio(self, audio: str) -> None:
        self.client(wire.AudioAppend(audio=audio, event_id="evt_bad"))

    @rule()
    def commit(self) -> None:
        self.client(wire.AudioCommit(event_id="evt_commit"))

    @rule()
    def clear(self) -> None:
        self.client(wire.AudioClear())

    @rule(modalities=st.sampled_from([None, ["text"], ["audio"]]))
    def response_create(self, modalities: list[str] | None) -> None:
        body = None if modalities is None else {"output_modalities": modalities}
        self.client(wire.ResponseCreate(response=body, event_id="evt_resp"))

    @rule(named=st.booleans())
    def response_cancel(self, named: bool) -> None:
        current = self.session.response
        response_id = (current.id if current else "resp_gone") if named else None
        self.client(wire.ResponseCancel(response_id=response_id, event_id="evt_cancel"))

    @rule()
    def output_clear(self) -> None:
        self.client(wire.OutputAudioClear())

    @rule(played=st.integers(0, 3000), pick=st.integers(0, 20))
    def playback_ack(self, played: int, pick: int) -> None:
        ids = [p.response_id for p in self.session.playbacks.values()] + ["resp_unknown"]
        self.client(wire.PlaybackAck(response_id=ids[pick % len(ids)], played_ms=played))

    @rule(short=st.sampled_from([0, 1, 30]), ms=st.sampled_from([100, 400]))
    def answer_played_and_acked_short(self, short: int, ms: int) -> None:
        """A whole answer spoken and played to its end, the client's last ack at or a little short
        of what was sent (vllm-omni's client acks ``int(played_ms)``)."""
        self.response_create(None)
        self.model_audio(ms)
        self.model_done("completed")
        self.advance_clock(2.0)
        for playback in self.session.playbacks.values():
            played = max(0, int(playback.sent_ms) - short)
            self.client(wire.PlaybackAck(response_id=playback.response_id, played_ms=played))

    @rule(end=st.integers(0, 3000), pick=st.integers(0, 20))
    def truncate(self, end: int, pick: int) -> None:
        ids = [*self.session.playbacks, "item_unknown"]
        self.is_client_truncate = True  # the client may cut any answer, finished or not
        try:
            self.client(
                wire.ItemTruncate(item_id=ids[pick % len(ids)], audio_end_ms=end, event_id="evt_trunc")
            )
        finally:
            self.is_client_truncate = False

    @rule(pick=st.integers(0, 20))
    def delete_item(self, pick: int) -> None:
        ids = [*self.session.playbacks, "item_unknown"]
        self.client(wire.ItemDelete(item_id=ids[pick % len(ids)]))

    @rule(text=st.sampled_from(["hi", ""]))
    def create_text_item(self, text: str) -> None:
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
        self.client(wire.ItemCreate(item=item))

    @rule(size=st.sampled_from([300_000, 700_000, MAX_HISTORY_CHARS + 1]))
    def create_long_text_item(self, size: int) -> None:
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x" * size}]}
        errors = len([e for e in self.sent if e["type"] == "error"])
        self.client(wire.ItemCreate(item=item, event_id="evt_long"))
        refused = [e for e in self.sent if e["type"] == "error"][errors:]
        if size > MAX_HISTORY_CHARS and not self.session.is_closed:  # longer than the whole history
            assert [e["error"]["param"] for e in refused] == ["item.content"]

    # --- function calls and the call ledger ---------------------------------------------

    @rule(reuse=st.booleans(), blank=st.booleans())
    def model_call(self, reuse: bool, blank: bool) -> None:
        """The model makes a call (possibly reusing an id, or giving none: the session makes one)."""
        known = [e["call_id"] for e in self.sent if e["type"] == "response.function_call_arguments.done"]
        call_id = "" if blank else (known[-1] if reuse and known else f"call_m{len(known)}")
        self.current(OutputKind.FUNCTION_CALL, call_id=call_id, name="lookup", text='{"q": 1}')

    @rule(pick=st.integers(0, 20), output=st.sampled_from(["ok", ""]))
    def client_call_output(self, pick: int, output: str) -> None:
        """The client answers a call: any made, in any order, again, late, or one never made."""
        made = [e["call_id"] for e in self.sent if e["type"] == "response.function_call_arguments.done"]
        # A negative pick counts from the newest call made.
        ids = [*made, "call_unknown"] if pick >= 0 else ["call_unknown", *made]
        call_id = ids[pick % len(ids)]
        state = self.session.calls.state(call_id)
        errors = len([e for e in self.sent if e["type"] == "error"])
        item = {"type": "function_call_output", "call_id": call_id, "output": output}
        self.client(wire.ItemCreate(item=item, event_id="evt_out"))
        refused = [e["error"]["code"] for e in self.sent if e["type"] == "error"][errors:]
        if self.session.is_closed:
            return
        expected = {
            None: ["unknown_call_id"],
            "answered": ["duplicate_function_call_output"],
            "abandoned": ["function_call_abandoned"],
            "pending": [],
        }[state]
        assert refused == expected, (call_id, state, refused)

    @rule(how=st.sampled_from(["cancel", "output_clear", "input_clear", "none"]), parallel=st.booleans())
    def spoken_calls_then_barge_in(self, how: str, parallel: bool) -> None:
        """An answer that speaks and calls, cut (or not) before the client's outputs arrive."""
        if self.session.response is None:
            self.response_create(None)
        self.model_text()
        self.model_audio(400)
        self.model_call(reuse=False, blank=False)
        if parallel:
            self.model_call(reuse=False, blank=True)
        self.advance_clock(0.05)
        if how == "cancel":
            self.response_cancel(named=False)
        elif how == "output_clear":
            self.output_clear()
        elif how == "input_clear":
            self.clear()
        for pick in range(2):
            self.client_call_output(pick=-1 - pick, output="late")

    @invariant()
    def v9_one_output_per_call_that_stood(self) -> None:
        """V9: one output per call in history, only for calls that stood; each call_id made once."""
        if not hasattr(self, "session"):
            return
        s = self.session
        outputs = Counter(i.call_id for i in s.conversation.items() if i.type == "function_call_output")
        assert all(count == 1 for count in outputs.values()), outputs
        for call_id in outputs:
            assert s.calls.state(call_id) in (None, "answered")  # None: forgotten (bounded ledger)
        for turn in s.conversation.history():
            if turn.kind != "message":
                assert s.calls.state(turn.call_id) in (None, "answered"), turn
        made = Counter(e["call_id"] for e in self.sent if e["type"].endswith("function_call_arguments.done"))
        assert all(count == 1 for count in made.values()), "a call_id was made twice"

    @invariant()
    def v5_history_is_bounded(self) -> None:
        """V5: history stays within its item and character bounds."""
        if hasattr(self, "session"):
            # Assistant transcripts grow after their item is added: a few words in this machine.
            assert self.session.conversation.chars() <= MAX_HISTORY_CHARS + 1_000
            assert len(self.session.conversation) <= MAX_ITEMS

    @rule(vad=st.sampled_from(["none", "server", "server_idle"]))
    def session_update(self, vad: str) -> None:
        detection: dict[str, Any] | None = {"type": "server_vad", "silence_duration_ms": 30}
        if vad == "server_idle":
            detection = {**detection, "idle_timeout_ms": 200}
        self.client(
            wire.session_update(
                {"audio": {"input": {"turn_detection": None if vad == "none" else detection}}}
            )
        )

    @rule(
        reduction=st.sampled_from([None, "near_field", "far_field", "studio"]),
        include=st.sampled_from([[], ["item.input_audio_transcription.logprobs"], ["item.content"]]),
    )
    def hearing_update(self, reduction: str | None, include: list[str]) -> None:
        """noise_reduction and include: a bad one is refused whole (``client``), a good one echoed."""
        noise = None if reduction is None else {"type": reduction}
        num_sent = len(self.sent)
        self.client(wire.session_update({"include": include, "audio": {"input": {"noise_reduction": noise}}}))
        updated = [e for e in self.sent[num_sent:] if e["type"] == "session.updated"]
        if reduction == "studio" or include == ["item.content"] or self.is_terminal_sent:
            assert not updated
        else:
            [event] = updated
            assert event["session"]["audio"]["input"]["noise_reduction"] == noise
            assert event["session"].get("include", []) == include

    @rule()
    def bad_session_update(self) -> None:
        self.client(wire.session_update({"audio": {"input": {"format": {"type": "audio/opus"}}}}))

    @rule(name=st.sampled_from(["scripted", "other"]), opens=st.booleans())
    def switch_model(self, name: str, opens: bool) -> None:
        """A model switch is allowed only before input or a response reached the model."""
        self.client(wire.session_update({"model": name}, event_id="evt_model"))
        switch, self.pending_switch = self.pending_switch, None
        if switch is None:
            return
        assert not any(a.kind in INPUT_KINDS for a in self.session.attempts)
        if opens:
            facts = ModelFacts(switch.name, RATE, RATE, self.session.model.has_vad)
            self.apply(drive(self.session.model_switched, facts, self.now))
            assert self.session.config.model == switch.name
        else:
            before = self.session.config
            self.apply(
                drive(
                    self.session.model_switch_failed, InvalidRequest("no such model", code="model_not_found")
                )
            )
            assert self.session.config == before and self.sent[-1]["error"]["event_id"] == "evt_model"

    @rule()
    def close(self) -> None:
        self.apply(drive(self.session.close, self.now))

    # --- runtime and model rules -------------------------------------------------------

    @precondition(lambda self: self.chain and not self.is_chain_blocked)
    @rule(fails=st.booleans())
    def run_chain_head(self, fails: bool) -> None:
        attempt = self.chain.popleft()
        if not attempt.is_live:
            return  # settled by a canceller: the runtime skips it
        if fails:
            self.is_chain_blocked = True
        outcome = Outcome.FAILED if fails else Outcome.OK
        self.apply(drive(self.session.settle, attempt, outcome, self.now, error="scripted failure"))
        if self.session.is_closed:
            self.is_chain_blocked = False
        elif fails and attempt.kind in INPUT_KINDS:
            # The turn is rolled back in the model too, so the next append starts afresh.
            assert any(a.kind is AttemptKind.CLEAR and a.is_live for a in self.chain)
            assert self.session.buffer_bytes == 0

    @rule(
        kind=st.sampled_from(list(OutputKind)),
        stale=st.booleans(),
        ms=st.sampled_from([10, 20, 100, 400]),
    )
    def model_output(self, kind: OutputKind, stale: bool, ms: int) -> None:
        epoch = self.session.epoch - 1 if stale else self.session.epoch
        response = self.session.response
        items = list(self.session.playbacks) or [None]
        self.model(
            VoiceOutput(
                kind=kind,
                epoch=epoch,
                response_id=None if response is None else response.id,
                item_id=items[0],
                text="word ",
                audio=pcm(ms, True) if kind is OutputKind.AUDIO_DELTA else b"",
                audio_ms=int(self.session.input_ms),
                status="completed",
            )
        )

    def current(self, kind: OutputKind, **fields: Any) -> None:
        response = self.session.response
        response_id = None if response is None else response.id
        self.model(VoiceOutput(kind=kind, epoch=self.session.epoch, response_id=response_id, **fields))

    @rule(ms=st.sampled_from([20, 100, 400]))
    def model_audio(self, ms: int) -> None:
        self.current(OutputKind.AUDIO_DELTA, audio=pcm(ms, True))

    @rule()
    def model_text(self) -> None:
        self.current(OutputKind.TEXT_DELTA, text="word ")

    @rule(status=st.sampled_from(["completed", "incomplete"]))
    def model_done(self, status: str) -> None:
        self.current(OutputKind.RESPONSE_DONE, status=status)

    @rule()
    def model_transcript(self) -> None:
        user_items = [e["item_id"] for e in self.sent if e["type"] == "input_audio_buffer.committed"]
        if user_items:
            self.current(OutputKind.TRANSCRIPT_DONE, item_id=user_items[-1], text="hello there")

    @rule(text=st.sampled_from(["What", " is", ""]))
    def model_live_caption(self, text: str) -> None:
        """A caption of the turn being spoken: no item id yet, the session gives it one."""
        expected = self.session.turns.item_id
        num_sent = len(self.sent)
        self.current(OutputKind.TRANSCRIPT_DELTA, text=text)
        deltas = [e for e in self.sent[num_sent:] if e["type"].endswith("input_audio_transcription.delta")]
        if expected is None or not text or self.session.is_closed:  # nothing follows session.closed
            assert deltas == [], "a caption was sent with no turn to belong to, or after the close"
        else:
            assert [e["item_id"] for e in deltas] == [expected]

    @rule()
    def become_transcription_session(self) -> None:
        self.client(wire.session_update({"type": "transcription"}))

    @invariant()
    def v10_transcription_sessions_never_answer(self) -> None:
        """V10: a transcription session never starts a response."""
        kinds = [(e["type"], e.get("session", {}).get("type")) for e in self.sent]
        since = next((i for i, k in enumerate(kinds) if k == ("session.updated", "transcription")), None)
        if since is not None:
            assert ("response.created", None) not in kinds[since:], "a transcription session answered"

    @invariant()
    def v10_transcription_deltas_name_a_turn(self) -> None:
        """V10: every transcription delta names an item that speech_started announced or a commit made."""
        known = {e["item_id"] for e in self.sent if e["type"] in TURN_ITEM_EVENTS}
        for e in self.sent:
            if e["type"] == "conversation.item.input_audio_transcription.delta":
                assert e["item_id"] in known

    @rule(seconds=st.sampled_from([0.01, 0.05, 0.3, 2.0]))
    def advance_clock(self, seconds: float) -> None:
        self.now += seconds
        deadline = self.session.next_deadline()
        self.apply(drive(self.session.tick, self.now))
        if deadline is not None and deadline <= self.now:
            next_deadline = self.session.next_deadline()
            assert next_deadline is None or next_deadline > self.now or next_deadline == deadline

    @rule()
    def outbox_overflow(self) -> None:
        self.apply(drive(self.session.on_outbox_overflow, self.now))

    # --- the promises (invariants named after docs/architecture.md's numbers) -----------

    @invariant()
    def v4_one_done_per_created(self) -> None:
        """V4: every response.created has exactly one response.done; none is stuck."""
        created = [e["response"]["id"] for e in self.sent if e["type"] == "response.created"]
        done = Counter(e["response"]["id"] for e in self.sent if e["type"] == "response.done")
        assert all(count == 1 for count in done.values()), done
        assert set(done) <= set(created)
        live = self.session.response
        assert set(created) - set(done) == (set() if live is None else {live.id}), "a response is stuck"

    @invariant()
    def v3_v5_reservations_exact(self) -> None:
        """V3 and V5: the ledger holds exactly what live attempts reserved, within its bounds."""
        s = self.session
        reserved = sum(a.reservation.num_bytes for a in s.attempts if a.reservation is not None)
        assert s.ledger.pending_bytes == reserved >= 0
        assert s.ledger.pending_bytes <= s.limits.max_input_bytes
        assert all(a.is_live for a in s.attempts)
        if not any(a.kind is AttemptKind.APPEND for a in s.attempts):
            assert s.ledger.pending_bytes == 0
        assert s.num_pending_commits <= s.limits.max_pending_commits
        controls = Counter(a.kind for a in s.attempts if a.kind not in INPUT_KINDS)
        assert all(count == 1 for count in controls.values()), "control attempts must stay bounded"

    @invariant()
    def v11_idle_timeouts_follow_finished_answers(self) -> None:
        """V11: the idle timeout fires once per finished answer, and what it starts ends."""
        kinds = [e["type"] for e in self.sent]
        # each finished response arms the idle timer once; firing starts a response of its own
        assert kinds.count("input_audio_buffer.timeout_triggered") <= kinds.count("response.done")
        for i, kind in enumerate(kinds):
            if kind == "input_audio_buffer.timeout_triggered":
                rest = kinds[i + 1 :]
                assert "response.created" in rest or "session.closed" in rest or "error" in rest

    @invariant()
    def v2_epoch_only_advances(self) -> None:
        """V2: the epoch fence only moves forward (stale output is checked in ``model``)."""
        assert self.session.epoch >= self.last_epoch
        self.last_epoch = self.session.epoch

    @invariant()
    def v4_closed_means_idle(self) -> None:
        """V4 and V3: after the terminal event nothing is reserved and no response is live."""
        if self.session.is_closed:
            assert self.is_terminal_sent
            assert self.session.ledger.pending_bytes == 0 and not self.session.attempts
            assert self.session.response is None

    @invariant()
    def v6_finished_answers_stay_whole(self) -> None:
        """V6: an answer whose audio has all been due at real time has finished, whatever the acks
        said: no later barge-in, clear or cancel cuts it (``apply`` checks each truncation)."""
        live = self.session.response
        for item_id, playback in self.session.playbacks.items():
            is_live = live is not None and live.playback is playback
            if not is_live and not playback.is_stopped and playback.is_all_due(self.now):
                self.finished.add(item_id)
                assert not playback.is_playing(self.now)

    @invariant()
    def v6_history_holds_what_was_heard(self) -> None:
        """V6: played <= sent <= generated, and a cut answer commits no more than was sent."""
        for playback in self.session.playbacks.values():
            assert 0 <= playback.played_ms <= playback.sent_ms <= playback.generated_ms + 1e-6
            if playback.is_stopped:
                assert playback.committed_ms <= playback.sent_ms + 1e-6

    def teardown(self) -> None:
        if not hasattr(self, "session"):
            return
        self.apply(drive(self.session.close, self.now))
        created = Counter(e["response"]["id"] for e in self.sent if e["type"] == "response.created")
        done = Counter(e["response"]["id"] for e in self.sent if e["type"] == "response.done")
        assert created == done
        assert [e["type"] for e in self.sent].count("session.closed") == 1
        assert self.sent[-1]["type"] == "session.closed"


TestVoiceCore = VoiceCore.TestCase
TestVoiceCore.settings = settings(settings(), stateful_step_count=80)
