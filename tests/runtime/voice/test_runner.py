"""The voice runner with a scripted model: chain failures, the fence at runtime, outbox overflow."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
from collections.abc import Callable
from typing import Any

from livegen.models.voice import StreamConfig
from livegen.protocol import realtime as wire
from livegen.runtime.voice.runner import Runner, RunnerLimits
from livegen.voice.session import Limits, ModelFacts, Session
from voice.scripted import ScriptedVoice


class Harness:
    def __init__(
        self, model: ScriptedVoice, limits: Limits | None = None, runner_limits: RunnerLimits | None = None
    ):
        self.model = model
        self.sent: list[dict[str, Any]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.limits = limits
        self.runner_limits = runner_limits

    async def start(self) -> Harness:
        counter = itertools.count()
        facts = ModelFacts(self.model.name, self.model.input_rate, self.model.output_rate, self.model.has_vad)
        self.session = Session("s", facts, lambda p: f"{p}_{next(counter)}", self.limits)
        self.stream = await self.model.open("s", StreamConfig())

        async def send_text(text: str) -> None:
            await self.gate.wait()
            self.sent.append(json.loads(text))

        self.runner = Runner(self.session, self.stream, send_text, limits=self.runner_limits)
        self.task = asyncio.create_task(self.runner.run())
        await self.client(
            {"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}
        )
        return self

    async def client(self, event: dict[str, Any]) -> None:
        await self.runner.put_client(wire.decode(json.dumps(event)))

    async def wait_for(self, predicate: Callable[[list[dict[str, Any]]], bool]) -> None:
        async with asyncio.timeout(10):
            while not predicate(self.sent):  # noqa: ASYNC110 - polls the runner's observable output
                await asyncio.sleep(0.005)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.sent if e["type"] == kind]

    async def close(self) -> None:
        self.gate.set()
        await self.runner.stop("test_done")
        await self.task


def append(ms: int) -> dict[str, Any]:
    return {"type": "input_audio_buffer.append", "audio": base64.b64encode(bytes(48 * ms)).decode()}


async def test_a_failed_append_rolls_back_the_chain_and_fails_its_response() -> None:
    model = ScriptedVoice()
    model.script.num_failing_appends = 1
    h = await Harness(model).start()
    for _ in range(3):
        await h.client(append(100))
    await h.client({"type": "input_audio_buffer.commit"})
    await h.client({"type": "response.create"})
    await h.wait_for(lambda sent: any(e["type"] == "response.done" for e in sent))
    done = h.of("response.done")[0]["response"]
    assert done["status"] == "failed" and done["status_details"]["error"]["code"] == "model_append_failed"
    assert [e["error"]["code"] for e in h.of("error")] == ["model_append_failed"]
    assert h.stream.received == []  # nothing behind the failed append reached the model
    assert h.session.ledger.pending_bytes == 0
    # The chain starts afresh: the next turn goes through whole.
    await h.client(append(100))
    await h.client({"type": "input_audio_buffer.commit"})
    await h.wait_for(lambda sent: len(sent) > 0 and sent[-1]["type"].endswith("transcription.completed"))
    assert sum(n for _, n in h.stream.received) == 3200  # exactly 100 ms at 16 kHz: the resampler tail too
    await h.close()
    assert h.sent[-1]["type"] == "session.closed"


async def test_output_of_an_old_epoch_never_reaches_the_client() -> None:
    model = ScriptedVoice()
    model.script.reply_ms, model.script.delay_s, model.script.is_deaf_to_cancel = 3000, 0.002, True
    h = await Harness(model, Limits(lead_ms=10_000)).start()
    await h.client({"type": "response.create"})
    await h.wait_for(lambda sent: any(e["type"] == "response.output_audio.delta" for e in sent))
    await h.client({"type": "response.cancel"})
    await h.wait_for(lambda sent: any(e["type"] == "response.done" for e in sent))
    num_sent = len(h.sent)
    await h.wait_for(lambda _: h.session.num_stale_outputs > 10)  # the deaf model keeps talking
    assert len(h.sent) == num_sent
    response_id = h.of("response.done")[0]["response"]["id"]
    done_at = next(i for i, e in enumerate(h.sent) if e["type"] == "response.done")
    assert not [e for e in h.sent[done_at:] if e.get("response_id") == response_id]
    await h.close()


async def test_a_client_that_does_not_read_fails_only_its_response() -> None:
    model = ScriptedVoice()
    model.script.reply_ms, model.script.chunk_ms = 5000, 20
    h = Harness(model, Limits(lead_ms=100_000), RunnerLimits(outbox=16))
    await h.start()
    h.gate.clear()  # the socket stops draining
    await h.client({"type": "response.create"})
    await h.wait_for(
        lambda _: (
            h.session.response is None and h.session.num_stale_outputs >= 0 and len(h.runner._outbox) > 0
        )
    )
    h.gate.set()
    await h.wait_for(lambda sent: any(e["type"] == "response.done" for e in sent))
    done = h.of("response.done")[0]["response"]
    assert done["status"] == "failed" and done["status_details"]["error"]["code"] == "outbox_overflow"
    assert len(h.of("response.output_audio.delta")) <= 16
    # The session goes on.
    await h.client({"type": "response.cancel", "event_id": "after"})
    await h.wait_for(lambda sent: any(e.get("error", {}).get("event_id") == "after" for e in sent))
    await h.close()


async def test_a_model_whose_outputs_end_closes_the_session_with_its_terminal() -> None:
    model = ScriptedVoice()
    model.script.reply_ms, model.script.delay_s = 20_000, 0.005
    h = await Harness(model).start()
    await h.client({"type": "response.create"})
    await h.wait_for(lambda sent: any(e["type"] == "response.output_audio.delta" for e in sent))
    await h.stream.queue.put(None)  # the model's output stream ends by itself
    await asyncio.wait_for(h.task, 10)
    kinds = [e["type"] for e in h.sent]
    assert kinds[-2:] == ["response.done", "session.closed"]
    assert h.sent[-1]["reason"] == "model_stream_ended"
    assert h.of("response.done")[0]["response"]["status"] == "cancelled"


class _WireRateVoice(ScriptedVoice):
    """Takes audio at the wire's rate: no resampler, so each append's size reaches it exactly."""

    input_rate = 24_000


async def test_a_burst_of_appends_is_applied_in_order_and_an_over_budget_one_is_refused_alone() -> None:
    """Appends that arrive together (queued before the runner wakes, as after a stall) reach the
    model in wire order, each reserved and settled once; the one over the input budget is
    refused with its own error and the rest go on (V3, V5)."""
    h = await Harness(_WireRateVoice(), limits=Limits(input_burst_ms=150)).start()
    sizes_ms = [10, 20, 200, 30, 40]  # 200 ms is more than one burst may carry
    for index, ms in enumerate(sizes_ms):  # no await yields between these: one burst
        await h.client({**append(ms), "event_id": f"evt_{index}"})
    await h.wait_for(lambda sent: len(h.stream.received) == 4 and h.session.ledger.num_pending == 0)
    assert [num_bytes // 48 for _, num_bytes in h.stream.received] == [10, 20, 30, 40]
    assert [e["error"].get("event_id") for e in h.of("error")] == ["evt_2"]
    assert h.session.ledger.pending_bytes == 0  # each reservation settled, none twice
    await h.close()


async def test_appends_the_model_took_give_their_budget_back_before_the_next_one() -> None:
    """Each append the model took is settled before the runner's next item (not through the
    mailbox): a stream of appends many times the input budget, each taken before the next is
    sent, is never refused, and the budget ends empty (V3, V5)."""
    h = await Harness(_WireRateVoice(), limits=Limits(max_input_bytes=48 * 100)).start()
    for index in range(20):  # 20 x 60 ms against a 100 ms budget
        await h.client(append(60))
        await h.wait_for(lambda sent, n=index + 1: len(h.stream.received) == n)
    await h.client({"type": "input_audio_buffer.commit"})
    await h.wait_for(lambda sent: bool(h.of("input_audio_buffer.committed")))
    assert h.of("error") == []
    assert h.session.ledger.pending_bytes == 0 and h.session.ledger.num_pending == 0
    await h.close()
