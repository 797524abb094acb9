"""The voice core with a native duplex (lockstep) model, as the Hypothesis state machine of the core.

``DuplexCore`` is ``VoiceCore`` (``test_session_machine.py``: every client,
chain, clock and model rule, and every invariant named after the promises)
on a session whose model is a lockstep model (``ModelFacts.frame_ms``), with
the duplex rules of ``voice/duplex.py`` on top: the model's own turns (audio
and text with no response id, its yield, the same of a stale epoch), the
user talking over it. What the duplex rules add to the promises (V13):

- a response per model turn: a turn's first output while no response is live
  begins exactly one (``response.created``), later outputs of the turn begin
  none, and a client never starts one (``response.create`` is refused);
- exactly one terminal each (V4, checked by the inherited invariants and the
  teardown), a model that stops while the user speaks included;
- no output of an old epoch reaches the client (V2, checked for every output).
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from livegen.errors import InvalidRequest
from livegen.models.voice import OutputKind, VoiceOutput
from livegen.protocol import realtime as wire
from livegen.voice.chain import Send
from livegen.voice.session import Limits, ModelFacts, Session
from voice.drive import drive
from voice.test_session_machine import RATE, VoiceCore, pcm


class DuplexCore(VoiceCore):
    @initialize(server_vad=st.booleans())
    def open(self, server_vad: bool) -> None:  # replaces VoiceCore.open: a duplex model
        counter = itertools.count()
        self.session = Session(
            "sess_1",
            ModelFacts("lockstep", RATE, RATE, False, frame_ms=40.0),
            ids=lambda prefix: f"{prefix}_{next(counter)}",
            limits=Limits(
                max_input_bytes=4000,
                max_pending_commits=2,
                lead_ms=40,
                input_rate_factor=2.0,
                input_burst_ms=1000.0,
            ),
        )
        self.now = 0.0
        self.chain: deque[Any] = deque()
        self.is_chain_blocked = False
        self.sent: list[dict[str, Any]] = []
        self.is_terminal_sent = False
        self.last_epoch = 0
        self.pending_switch = None
        self.finished: set[str] = set()
        self.is_client_truncate = False
        self.apply(drive(self.session.open, self.now))
        created = self.sent[-1]["session"]["capabilities"]
        assert created["duplex"] == "native" and created["model_initiated_responses"]
        fmt = {"type": "audio/pcm", "rate": RATE}
        audio_in: dict[str, Any] = {"format": fmt}
        update = {"audio": {"input": audio_in, "output": {"format": fmt}}}
        self.apply(drive(self.session.receive, wire.session_update(update), self.now))
        if server_vad:  # a quick detector (the operator's, never the client's); else the default one
            quick = {
                "audio": {"input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 30}}}
            }
            with pytest.raises(InvalidRequest, match="turn detection cannot be set"):
                self.session.receive(wire.session_update(quick), self.now)
            vad = replace(self.session.config.turn_detection, silence_duration_ms=30)
            self.session.config = replace(self.session.config, turn_detection=vad)
            self.session._reset_vad()

    def turn(self, kind: OutputKind, stale: bool = False, **fields: Any) -> None:
        """One output of the model's own turn: no response id (the session owns responses)."""
        before = [e for e in self.sent if e["type"] == "response.created"]
        was_live = self.session.response is not None and self.session.response.model_status is None
        epoch = self.session.epoch - 1 if stale else self.session.epoch
        self.model(VoiceOutput(kind=kind, epoch=epoch, **fields))
        begun = [e for e in self.sent if e["type"] == "response.created"][len(before) :]
        if stale or self.session.is_closed or kind is OutputKind.RESPONSE_DONE or was_live:
            assert begun == [], "a response began without a new turn of the model"
        else:
            assert len(begun) == 1, "a model turn began no response, or more than one"

    @rule(ms=st.sampled_from([40, 80, 400]), stale=st.booleans())
    def model_turn_audio(self, ms: int, stale: bool) -> None:
        self.turn(OutputKind.AUDIO_DELTA, stale, audio=pcm(ms, True))

    @rule(stale=st.booleans())
    def model_turn_text(self, stale: bool) -> None:
        self.turn(OutputKind.TEXT_DELTA, stale, text="w ")

    @rule(stale=st.booleans())
    def model_yields(self, stale: bool) -> None:
        speaking = self.session.turns.in_speech and self.session.response is not None and not stale
        epoch = self.session.epoch
        self.turn(OutputKind.RESPONSE_DONE, stale, status="completed")
        if speaking and not self.session.is_closed:  # it stopped for the user: cut, through the fence
            assert self.session.epoch == epoch + 1 and self.sent[-1]["type"] != "response.created"
            done = next(e for e in reversed(self.sent) if e["type"] == "response.done")
            assert done["response"]["status"] == "cancelled"

    @rule()
    def user_talks_over(self) -> None:
        """Speech starting on the input while the model speaks: a barge-in (cancelled, cut)."""
        live = self.session.response
        num_sent = len(self.sent)
        self.client(wire.AudioAppend(audio=_b64(pcm(100, True)), event_id="evt_over"))
        new = [e["type"] for e in self.sent[num_sent:]]
        if live is not None and "input_audio_buffer.speech_started" in new:
            assert self.session.response is None
            done = next(e for e in self.sent[num_sent:] if e["type"] == "response.done")
            assert done["response"]["id"] == live.id and done["response"]["status"] == "cancelled"

    @rule(name=st.sampled_from(["lockstep", "other"]), opens=st.booleans())
    def switch_model(self, name: str, opens: bool) -> None:  # replaces VoiceCore's: to a duplex model
        self.client(wire.session_update({"model": name}, event_id="evt_model"))
        switch, self.pending_switch = self.pending_switch, None
        if switch is not None and opens:
            facts = ModelFacts(switch.name, RATE, RATE, False, frame_ms=40.0)
            self.apply(drive(self.session.model_switched, facts, self.now))

    def refused(self, event: wire.ClientEvent) -> list[tuple[str, str | None]]:
        """``event``'s refusals (code, param): what the model cannot do is refused, never ignored."""
        num_sent = len(self.sent)
        self.client(event)
        return [
            (e["error"]["code"], e["error"]["param"]) for e in self.sent[num_sent:] if e["type"] == "error"
        ]

    @rule(reduction=st.sampled_from([None, "near_field"]), include=st.sampled_from([[], ["item.content"]]))
    def hearing_update(self, reduction: str | None, include: list[str]) -> None:  # type: ignore[override]
        noise = None if reduction is None else {"type": reduction}
        update = wire.session_update({"include": include, "audio": {"input": {"noise_reduction": noise}}})
        refusals = self.refused(update)
        if self.session.is_closed:
            return
        if include:
            assert refusals == [("invalid_value", "session.include[0]")]
        elif reduction is not None:
            assert refusals == [("unsupported_parameter", "session.audio.input.noise_reduction")]
        else:
            assert refusals == []

    @rule(pick=st.integers(0, 20), output=st.sampled_from(["ok", ""]))
    def client_call_output(self, pick: int, output: str) -> None:  # type: ignore[override]
        item = {"type": "function_call_output", "call_id": "call_x", "output": output}
        if not self.session.is_closed:
            assert self.refused(wire.ItemCreate(item=item, event_id="evt_out")) == [
                ("unsupported_parameter", "type")
            ]

    @rule(size=st.sampled_from([10, 700_000]))
    def create_long_text_item(self, size: int) -> None:  # type: ignore[override]
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x" * size}]}
        if not self.session.is_closed:
            assert self.refused(wire.ItemCreate(item=item)) == [("unsupported_parameter", "type")]

    @rule()
    def response_create(self, modalities: list[str] | None = None) -> None:  # type: ignore[override]
        num_sent = len(self.sent)
        self.client(wire.ResponseCreate(response=None, event_id="evt_resp"))
        if not self.session.is_closed:
            errors = [e["error"] for e in self.sent[num_sent:] if e["type"] == "error"]
            assert [(e["code"], e["param"]) for e in errors] == [("unsupported_parameter", "type")]

    def model(self, output: VoiceOutput) -> None:
        self.in_model_output = True
        try:
            super().model(output)
        finally:
            self.in_model_output = False

    def apply(self, effects: list[Any]) -> list[Any]:
        """Every effect as ``VoiceCore`` checks it, and: a response begins only with a model's
        output (never with a client event, the chain, the clock or a speech edge)."""
        for effect in effects:
            if isinstance(effect, Send) and effect.type == "response.created":
                assert getattr(self, "in_model_output", False), "a response began that no model turn began"
        return super().apply(effects)


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


TestDuplexCore = DuplexCore.TestCase
TestDuplexCore.settings = settings(settings(), max_examples=60, stateful_step_count=60)
