"""GPT-Live's usage meter (``protocol/live/usage.py``), sans-IO: seconds, breakdown, context window."""

from __future__ import annotations

from livegen.protocol.live import events as live
from livegen.protocol.live.usage import Meter


def done(input_tokens: int, output_tokens: int, delegation_id: str | None = None) -> dict[str, object]:
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    return {"status": "completed", "usage": usage, "metadata": {"delegation_id": delegation_id}}


def test_seconds_are_whole_a_second_begun_counts_and_never_go_back() -> None:
    meter = Meter()
    assert meter.usage(0) == live.Usage(seconds=0)
    meter.tell_time(1001)
    assert meter.usage(0).seconds == 2
    meter.tell_time(500)  # a clock read late never takes a second back
    assert meter.usage(0).seconds == 2
    assert meter.usage(4200).seconds == 5  # audio sent faster than real time: its timeline


def test_a_webrtc_session_reports_every_second_active() -> None:
    meter = Meter(breakdown=True)
    meter.tell_time(2500)
    assert meter.usage(0) == live.Usage(seconds=3, active_seconds=3, paused_seconds=0)
    assert '"active_seconds"' not in live.encode(
        live.SessionUsageUpdated(event_id="e", usage=Meter().usage(0))
    )


def test_the_context_window_is_the_latest_responses_count_over_the_window() -> None:
    meter = Meter(context_tokens=1000)
    assert meter.window() is None  # nothing measured yet
    meter.measure(done(300, 50))
    assert meter.window() == live.ContextWindow(usage_ratio=0.35)
    meter.measure(done(900, 40, delegation_id="del_1"))  # a delegated task: outside the conversation
    meter.measure({"status": "cancelled"})  # no usage: the last count stands
    assert meter.window() == live.ContextWindow(usage_ratio=0.35)
    meter.measure(done(1200, 30))
    assert meter.window() == live.ContextWindow(usage_ratio=1.0)


def test_no_window_is_reported_when_the_model_has_none() -> None:
    meter = Meter()
    meter.measure(done(300, 50))
    assert meter.window() is None
