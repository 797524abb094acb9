"""Speech recognition batched across sessions: each gets its own words, finals first, nothing lost.

Real Whisper (the server's default recogniser) on real synthesised speech.
The batcher's workers are started after the requests are queued, so what
goes into one batch does not depend on timing; the sessions' test goes
through real cascade streams, several speaking at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from livegen.models.cascade import asr
from livegen.models.cascade.asr_batch import Batcher, BatchStats, Priority
from livegen.models.voice import OutputKind, StreamConfig, TurnDetection
from models.cascade.support import Driver, speak_as_user

pytestmark = pytest.mark.slow

#: Different lengths on purpose: a short one must not cut a long one in the same batch.
UTTERANCES = (
    ("What is seven times six?", ("seven", "six")),
    ("Turn on the kitchen lights please.", ("kitchen", "lights")),
    ("How far away is the moon from the earth tonight?", ("far away", "moon", "tonight")),
    ("Repeat after me, the weather is lovely.", ("weather", "lovely")),
)


def _samples(pcm16: bytes) -> np.ndarray:
    return np.frombuffer(pcm16, "<i2").astype(np.float32) / 32768.0


def _heard(text: str, words: tuple[str, ...]) -> bool:
    return all(word in text.lower() for word in words)


@pytest.fixture(scope="module")
def spoken(cascade: Any) -> list[np.ndarray]:
    return [_samples(speak_as_user(cascade, text, trail_s=0.3)) for text, _ in UTTERANCES]


def test_one_batch_gives_each_utterance_its_own_whole_transcript(
    cascade: Any, spoken: list[np.ndarray]
) -> None:
    batcher = Batcher(cascade.recognizer_for, stats=BatchStats())
    futures = [batcher.submit(audio, asr.Options()) for audio in spoken]
    batcher.start()
    texts = [future.result(timeout=120) for future in futures]
    batcher.close()
    assert dict(batcher.stats.sizes) == {len(spoken): 1}
    # Each its own whole transcript: what decoding it alone gives (not tiny.en's accuracy on
    # espeak's voices, which it mishears in places).
    assert texts == [cascade.recognizer.transcribe(audio).text for audio in spoken]


def test_a_batch_matches_decoding_each_alone(cascade: Any, spoken: list[np.ndarray]) -> None:
    alone = [cascade.recognizer.transcribe(audio).text for audio in spoken]
    together = [t.text for t in cascade.recognizer.transcribe_batch(spoken)]
    assert together == alone


def test_finals_go_before_captions_and_a_cancelled_decode_is_dropped(
    cascade: Any, spoken: list[np.ndarray]
) -> None:
    batcher = Batcher(cascade.recognizer_for, max_batch=2, caption_stale_s=600, stats=BatchStats())
    order: list[str] = []
    caption = batcher.submit(spoken[0], asr.Options(), Priority.CAPTION)
    closed = batcher.submit(spoken[1], asr.Options())  # its session closes before it is decoded
    finals = [batcher.submit(audio, asr.Options()) for audio in spoken[2:]]
    closed.cancel()
    for name, future in [("caption", caption), *(("final", f) for f in finals)]:
        future.add_done_callback(lambda _, name=name: order.append(name))
    batcher.start()
    assert _heard(caption.result(timeout=120), UTTERANCES[0][1])
    batcher.close()
    assert order == ["final", "final", "caption"]
    assert batcher.stats.num_cancelled == 1
    assert sum(size * count for size, count in batcher.stats.sizes.items()) == 3


def test_scorings_share_a_call_never_one_with_decodes_and_score_as_alone(
    cascade: Any, spoken: list[np.ndarray]
) -> None:
    """Transcript logprobs (and the barge-in gate's check) go through the queue like finals."""
    recognizer = cascade.recognizer
    texts = [recognizer.transcribe(audio).text for audio in spoken]
    alone = [recognizer.logprobs(audio, text) for audio, text in zip(spoken, texts, strict=True)]
    batcher = Batcher(cascade.recognizer_for, stats=BatchStats())
    scorings = [batcher.submit_score(a, t, asr.Options()) for a, t in zip(spoken, texts, strict=True)]
    decode = batcher.submit(spoken[0], asr.Options())
    batcher.start()
    together = [future.result(timeout=120) for future in scorings]
    assert decode.result(timeout=120) == texts[0]
    batcher.close()
    assert dict(batcher.stats.sizes) == {len(spoken): 1, 1: 1}
    for one, many in zip(alone, together, strict=True):
        assert [entry.token for entry in many] == [entry.token for entry in one]
        assert [entry.logprob for entry in many] == pytest.approx([entry.logprob for entry in one], abs=0.1)


def test_a_caption_that_waited_too_long_is_dropped_a_final_never(
    cascade: Any, spoken: list[np.ndarray]
) -> None:
    batcher = Batcher(cascade.recognizer_for, caption_stale_s=0.0, stats=BatchStats())
    caption = batcher.submit(spoken[0], asr.Options(), Priority.CAPTION)
    final = batcher.submit(spoken[1], asr.Options())
    batcher.start()
    assert _heard(final.result(timeout=120), UTTERANCES[1][1])
    batcher.close()
    assert caption.cancelled()
    assert batcher.stats.num_captions_dropped == 1


async def test_sessions_speaking_at_once_each_get_their_own_transcript(cascade: Any) -> None:
    assert cascade.batcher is not None  # the server's default path batches
    before = dict(cascade.stats.batches.sizes)
    config = StreamConfig(turn_detection=TurnDetection(), transcription_model="whisper-1")
    streams = [await cascade.open(f"s{index}", config) for index in range(len(UTTERANCES))]
    drivers = [Driver(stream) for stream in streams]
    speech = [speak_as_user(cascade, text) for text, _ in UTTERANCES]

    async def turn(driver: Driver, pcm: bytes) -> str:
        await driver.say(1, pcm, realtime=True)
        await driver.wait_for(OutputKind.SPEECH_STOPPED)
        await driver.stream.commit(1, "item_1")
        done = await driver.wait_for(OutputKind.TRANSCRIPT_DONE, item_id="item_1")
        return done.text

    texts = await asyncio.gather(*(turn(d, pcm) for d, pcm in zip(drivers, speech, strict=True)))
    for driver in drivers:
        await driver.close()
    # Each session its own transcript: one of its own words (the sets share none), whatever else
    # tiny.en misheard in espeak's voice.
    for text, (_, words) in zip(texts, UTTERANCES, strict=True):
        assert any(word in text.lower() for word in words), texts
    assert cascade.stats.batches.sizes != before  # they went through the batcher


def test_recognition_is_sized_to_the_cores_and_batch_1_is_the_old_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from livegen.models.cascade.model import AsrSizing

    monkeypatch.setattr("os.sched_getaffinity", lambda _: {0, 1})
    for name in ("LIVEGEN_ASR_BATCH", "LIVEGEN_ASR_WORKERS", "LIVEGEN_ASR_THREADS"):
        monkeypatch.delenv(name, raising=False)
    assert AsrSizing.from_env() == AsrSizing(8, 2, 1)
    monkeypatch.setenv("LIVEGEN_ASR_WORKERS", "1")
    assert AsrSizing.from_env() == AsrSizing(8, 1, 2)
    monkeypatch.setenv("LIVEGEN_ASR_BATCH", "1")
    old = AsrSizing.from_env()
    assert old.is_serial and old.inter_threads == 1 and old.threads == 2


def test_recognition_in_a_ray_actor_is_sized_to_the_cores_not_to_its_num_cpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cluster's speech service asks Ray for one CPU, and Ray sets OMP_NUM_THREADS to that in
    the actor; its recogniser still decodes on every core it may run on (its affinity)."""
    from livegen.models.cascade.model import AsrSizing, available_cores

    for name in ("LIVEGEN_ASR_BATCH", "LIVEGEN_ASR_WORKERS", "LIVEGEN_ASR_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr("os.sched_getaffinity", lambda _: set(range(8)))
    assert available_cores() == 8
    assert AsrSizing.from_env() == AsrSizing(8, 4, 2)
