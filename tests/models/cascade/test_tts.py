"""The speech workers: separate processes, pooled, supervised, cancellable, fair between sessions."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from livegen.errors import ModelError
from livegen.models.cascade import sentences, tts
from livegen.models.cascade.supervisor import Timing

pytestmark = pytest.mark.slow

LONG = "This sentence is long enough that synthesising it takes a little while, even for espeak. " * 8
#: Short clocks, so a stopped worker is found in about a second.
QUICK = Timing(ping_every_s=0.2, liveness_s=1.0, backoff_min_s=0.1)


@pytest.fixture(scope="module")
def worker() -> Iterator[tts.Pool]:
    started = tts.Pool(engines=("espeak",), size=2, timing=QUICK)
    yield started
    started.close()


def eventually(condition: Callable[[], Any], within: float = 30.0) -> Any:
    """``condition()`` once it is truthy; fails if it is not within the (generous) deadline."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.02)
    raise AssertionError(f"not within {within} s")


def test_speaks_pcm16_at_24_khz_in_another_process(worker: tts.Pool) -> None:
    speech = worker.speak("Hello there.", "espeak", "en-us").result(timeout=30)
    assert speech.engine == "espeak"
    seconds = len(speech.pcm) / 2 / tts.SAMPLE_RATE
    assert 0.4 < seconds < 3.0
    assert worker.pid() not in (None, os.getpid())


def test_espeak_says_a_sentence_the_same_whatever_was_said_before(worker: tts.Pool) -> None:
    """espeak-ng keeps synthesis state between utterances; tests and bench sets need repeatable audio."""
    sentence = "Turn on the kitchen lights."
    first = [worker.speak(sentence, "espeak", "en-us+m2").result(timeout=30).pcm for _ in range(2)]
    for other in ("What is the weather like in Paris today?", "Hello there.", LONG[:80]):
        worker.speak(other, "espeak", "en-us+m2").result(timeout=30)
    again = [worker.speak(sentence, "espeak", "en-us+m2").result(timeout=30).pcm for _ in range(2)]
    assert first[0] and first == again == [first[0], first[0]]


def test_piper_requested_but_absent_falls_back_to_espeak(worker: tts.Pool) -> None:
    assert worker.speak("Hello.", "piper").result(timeout=30).engine == "espeak"


def test_an_unknown_voice_fails_that_request_only(worker: tts.Pool) -> None:
    with pytest.raises(tts.SynthesisError, match="no voice"):
        worker.speak("Hello.", "espeak", "xx-nonexistent").result(timeout=30)
    assert worker.speak("Still here.", "espeak").result(timeout=30).pcm


def test_cancelled_requests_are_skipped_and_the_rest_are_answered(worker: tts.Pool) -> None:
    futures = [worker.speak(LONG, "espeak", owner="one-session") for _ in range(6)]
    for future in futures[1:5]:
        future.cancel()
    last = futures[5].result(timeout=60)
    assert futures[0].result(timeout=60).pcm and last.pcm
    assert all(future.cancelled() for future in futures[1:5])


def test_a_long_text_is_spoken_in_bounded_parts_and_joined(worker: tts.Pool) -> None:
    parts = sentences.bound(LONG)
    assert len(parts) > 1 and all(len(part) <= sentences.MAX_PIECE_CHARS for part in parts)
    whole = worker.speak(LONG, "espeak").result(timeout=60).pcm
    apart = sum(len(worker.speak(part, "espeak").result(timeout=60).pcm) for part in parts)
    assert abs(len(whole) - apart) < 0.001 * apart  # the same audio, up to resampling's rounding


def test_a_killed_worker_fails_only_its_job_and_is_restarted() -> None:
    pool = tts.Pool(engines=("espeak",), size=2, timing=QUICK)
    try:
        pid = pool.slots[0].pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        eventually(lambda: pool.slots[0].pid() not in (None, pid) and pool.health()[0])
        assert pool.num_starts == 3 and pool.slots[1].num_starts == 1
        assert all(f.result(timeout=30).pcm for f in [pool.speak("I am back.", "espeak") for _ in range(4)])
    finally:
        pool.close()


def test_a_stopped_worker_is_reported_failed_over_and_restarted() -> None:
    pool = tts.Pool(engines=("espeak",), size=2, timing=QUICK)
    try:
        stopped = pool.slots[0].pid()
        assert stopped is not None
        os.kill(stopped, signal.SIGSTOP)
        # Sessions keep being answered by the other worker while the stopped one is found out.
        answers = [pool.speak("Still talking.", "espeak", owner=f"s{i}") for i in range(6)]
        _, reason, workers = eventually(lambda: (h := pool.health())[0] is False and h)
        assert "stopped answering" in reason and f"pid {stopped}" in reason
        assert workers[0]["state"] == "restarting" and workers[1]["state"] in ("ready", "busy")
        for answer in answers:  # each is spoken, or failed cleanly if it was on the stopped worker
            with contextlib.suppress(tts.SpeechWorkerStuck):
                assert answer.result(timeout=30).pcm
        eventually(lambda: pool.health()[0])
        assert pool.slots[0].pid() not in (None, stopped)
        assert pool.speak("Back again.", "espeak").result(timeout=30).pcm
    finally:
        pool.close()


def test_a_job_on_a_stopped_worker_fails_within_the_liveness_clock() -> None:
    pool = tts.Pool(engines=("espeak",), size=1, timing=QUICK)
    try:
        stopped = pool.slots[0].pid()
        assert stopped is not None
        os.kill(stopped, signal.SIGSTOP)
        with pytest.raises(tts.SpeechWorkerStuck, match="stopped answering"):
            pool.speak("Are you there?", "espeak", owner="s1").result(timeout=30)
        assert pool.speak("Yes.", "espeak", owner="s1").result(timeout=60).pcm
    finally:
        pool.close()


def test_asking_never_blocks_on_a_stopped_worker() -> None:
    # The old worker took requests by a blocking write on the caller's thread (the event loop):
    # once a stopped worker's 64 KiB pipe was full, the whole server froze until it resumed.
    pool = tts.Pool(engines=("espeak",), size=1, timing=QUICK)
    try:
        os.kill(pool.pid() or 0, signal.SIGSTOP)
        futures: list[concurrent.futures.Future[tts.Speech]] = []
        asker = threading.Thread(
            target=lambda: futures.extend(pool.speak(LONG, "espeak", owner=f"s{i}") for i in range(300))
        )
        asker.start()
        asker.join(timeout=30)
        assert not asker.is_alive() and len(futures) == 300  # 200 KB asked for, none of it blocked
        for future in futures[3:]:
            future.cancel()
        outcomes = []
        for future in futures[:3]:
            try:
                outcomes.append(bool(future.result(timeout=60).pcm))
            except tts.SpeechWorkerStuck:
                outcomes.append(False)
        # The one on the stopped worker failed (unless the worker was caught out by a ping first);
        # its replacement spoke the rest.
        assert outcomes in ([False, True, True], [True, True, True])
    finally:
        pool.close()


def test_closing_ends_the_processes() -> None:
    pool = tts.Pool(engines=("espeak",), size=2)
    pids = pool.pids()
    pool.close()
    assert pool.pids() == [None, None]
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid or 0, 0)
    with pytest.raises(ModelError, match="closed"):
        pool.speak("Hello.", "espeak").result(timeout=5)


def test_futures_are_plain_concurrent_futures(worker: tts.Pool) -> None:
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
        tts.Pool(engines=("no-such-engine",), size=1)


# -- one worker, Piper: a long sentence must not hold it --------------------------------------------

WORDS = " ".join(["the quick brown fox jumps over the lazy dog"] * 70)  # 630 words, one sentence


@pytest.fixture(scope="module")
def piper() -> Iterator[tts.Pool]:
    started = tts.Pool(engines=("piper",), size=1)
    yield started
    started.close()


def test_sessions_take_turns_part_by_part(piper: tts.Pool) -> None:
    done: list[str] = []
    long = piper.speak(f"{WORDS}.", owner="talker")
    long.add_done_callback(lambda _: done.append("talker"))
    short = piper.speak("Hello.", owner="other")
    short.add_done_callback(lambda _: done.append("other"))
    assert short.result(timeout=120).pcm
    assert done == ["other"]  # answered between the talker's parts, not after all of them
    long.cancel()


def test_a_cancel_mid_sentence_frees_the_worker_for_another_session(piper: tts.Pool) -> None:
    long = piper.speak(f"{WORDS}.", owner="leaver")
    eventually(lambda: piper.slots[0].state == "busy")
    parts_before = piper.num_parts
    long.cancel()
    assert piper.speak("Hello.", owner="other").result(timeout=120).pcm
    # The part in the worker when it was cancelled (maybe the next one too), then the other session's:
    # not the fifteen parts left of the sentence.
    assert piper.num_parts <= parts_before + 3
    assert piper.slots[0].num_starts == 1  # no restart was needed


def test_a_part_past_its_deadline_fails_and_its_worker_is_replaced() -> None:
    # A synthesiser hung in native code still answers pings (the reader thread does); the
    # deadline, scaled to the text, is what catches it. Here Piper is simply given too little time
    # for 200 characters (it needs half a second or more), and espeak-ng plenty for two.
    hurried = Timing(deadline_base_s=0.1, deadline_per_char_s=0.0, backoff_min_s=0.1)
    pool = tts.Pool(engines=("piper", "espeak"), size=1, timing=hurried)
    try:
        pid = pool.pid()
        with pytest.raises(tts.SpeechWorkerStuck, match="deadline"):
            pool.speak(f"{WORDS[:199]}.", owner="s1").result(timeout=60)
        eventually(lambda: pool.pid() not in (None, pid) and pool.health()[0], within=60)
        assert pool.speak("Hi.", "espeak", owner="s1").result(timeout=60).pcm
    finally:
        pool.close()
