"""The speech worker: a separate process, shared, cancellable, and restarted when it dies."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from livegen.errors import ModelError
from livegen.models.cascade import tts

pytestmark = pytest.mark.slow

LONG = "This sentence is long enough that synthesising it takes a little while, even for espeak. " * 8


@pytest.fixture(scope="module")
def worker() -> Iterator[tts.Worker]:
    started = tts.Worker(engines=("espeak",))
    yield started
    started.close()


def test_speaks_pcm16_at_24_khz_in_another_process(worker: tts.Worker) -> None:
    speech = worker.speak("Hello there.", "espeak", "en-us").result(timeout=30)
    assert speech.engine == "espeak"
    seconds = len(speech.pcm) / 2 / tts.SAMPLE_RATE
    assert 0.4 < seconds < 3.0
    assert worker.pid() not in (None, os.getpid())


def test_piper_requested_but_absent_falls_back_to_espeak(worker: tts.Worker) -> None:
    assert worker.speak("Hello.", "piper").result(timeout=30).engine == "espeak"


def test_an_unknown_voice_fails_that_request_only(worker: tts.Worker) -> None:
    with pytest.raises(ModelError, match="no voice"):
        worker.speak("Hello.", "espeak", "xx-nonexistent").result(timeout=30)
    assert worker.speak("Still here.", "espeak").result(timeout=30).pcm


def test_cancelled_requests_are_skipped_and_the_rest_are_answered(worker: tts.Worker) -> None:
    futures = [worker.speak(LONG, "espeak") for _ in range(6)]
    for future in futures[1:5]:
        future.cancel()
    last = futures[5].result(timeout=60)
    assert futures[0].result(timeout=60).pcm and last.pcm
    assert all(future.cancelled() for future in futures[1:5])


def test_a_dead_worker_fails_its_requests_and_is_restarted() -> None:
    worker = tts.Worker(engines=("espeak",))
    try:
        pending = [worker.speak(LONG, "espeak") for _ in range(4)]
        pid = worker.pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        outcomes = []
        for future in pending:
            try:
                future.result(timeout=30)
                outcomes.append("ok")
            except ModelError:
                outcomes.append("failed")
        assert "failed" in outcomes and outcomes == sorted(outcomes, key=lambda o: o != "ok")
        again = worker.speak("I am back.", "espeak").result(timeout=30)
        assert again.pcm and worker.num_starts == 2 and worker.pid() != pid
    finally:
        worker.close()


def test_closing_ends_the_process() -> None:
    worker = tts.Worker(engines=("espeak",))
    pid = worker.pid()
    worker.close()
    assert worker.pid() is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid or 0, 0)


def test_futures_are_plain_concurrent_futures(worker: tts.Worker) -> None:
    # Streams on any event loop await them with asyncio.wrap_future.
    assert isinstance(worker.speak("Hi.", "espeak"), concurrent.futures.Future)


def test_the_gpl_synthesisers_stay_out_of_livegen_s_process(cascade: Any) -> None:
    assert cascade.speak("Hello.").result(timeout=60).engine == "piper"
    assert cascade.speak("Hello.", "espeak").result(timeout=60).engine == "espeak"
    assert not {"piper", "espeakng_loader"} & set(sys.modules)
    maps = Path("/proc/self/maps")
    if maps.exists():
        assert "espeak" not in maps.read_text() and "piper" not in maps.read_text()


def test_a_worker_with_no_engine_is_a_clear_error() -> None:
    with pytest.raises(ModelError, match="loaded no engine"):
        tts.Worker(engines=("no-such-engine",))
