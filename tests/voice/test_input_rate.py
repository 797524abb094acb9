"""The input rate bound: faster than real time within limits, a flood refused before decoding."""

from __future__ import annotations

import base64
import itertools

import pytest

from livegen.errors import CapacityExceeded
from livegen.protocol import realtime as wire
from livegen.voice.input_rate import InputRate
from livegen.voice.session import Limits, ModelFacts, Session
from voice.drive import drive

RATE = 24_000


def append(seconds: float) -> wire.AudioAppend:
    return wire.AudioAppend(audio=base64.b64encode(bytes(int(RATE * seconds) * 2)).decode())


def session(**limits: float) -> Session:
    counter = itertools.count()
    facts = ModelFacts("m", RATE, RATE, False)
    return Session("s", facts, lambda p: f"{p}_{next(counter)}", Limits(**limits))


def test_the_bucket_refills_at_the_factor_and_holds_at_most_the_burst() -> None:
    bucket = InputRate(factor=2.0, burst_ms=1000.0)
    bucket.check(1000.0, 0.0)
    bucket.spend(1000.0)
    with pytest.raises(CapacityExceeded) as caught:
        bucket.check(1.0, 0.0)
    assert (caught.value.code, caught.value.param) == ("rate_limit_exceeded", "audio")
    bucket.check(400.0, 0.2)  # 0.2 s at 2x real time: 400 ms back
    bucket.check(1000.0, 100.0)  # never more than the burst
    with pytest.raises(CapacityExceeded):
        bucket.check(1001.0, 200.0)


def test_an_append_of_more_than_the_burst_is_refused_and_leaves_the_session_as_it_was() -> None:
    core = session(input_burst_ms=2_000.0, input_rate_factor=1.0)
    with pytest.raises(CapacityExceeded) as caught:
        drive(core.receive, append(3.0), 0.0)
    assert caught.value.code == "rate_limit_exceeded"
    assert core.buffer_bytes == 0 and core.ledger.pending_bytes == 0 and core.attempts == []
    drive(core.receive, append(2.0), 0.0)  # the refusal spent nothing
    with pytest.raises(CapacityExceeded):
        drive(core.receive, append(0.5), 0.1)  # 100 ms came back, not 500
    drive(core.receive, append(0.5), 0.6)


def test_real_time_streaming_is_never_refused_by_default() -> None:
    core = session()
    for index in range(3_000):  # 60 s in 20 ms appends, each as it is spoken
        drive(core.receive, append(0.02), index * 0.02)
        core.ledger.clear()  # the model took it
