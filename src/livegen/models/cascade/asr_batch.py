"""Speech recognition for every session of a process: decodes that wait together run as one batch.

Every session's recognition goes through one ``Batcher``: end-of-turn
decodes (``FINAL``: a speculation at a pause, the tail of a turn, a
re-decode) and live-caption decodes (``CAPTION``). Its workers each take the
waiting requests that can share a Whisper call (same recogniser, language,
prompt and decoding window) up to ``max_batch``, finals first, and decode
them with ``asr.Recognizer.transcribe_batch``. A batch of eight costs about
as much as two decodes alone on two cores, so under load the wait no longer
grows with the number of sessions in the queue.

Scoring a transcript's tokens (``asr.Recognizer.logprobs``: transcription
``logprobs``, the barge-in gate's check) goes through the same queue as a
final, batched with other scorings that share a call, never with decodes.

A final is never dropped. A caption is only a guess that the next one will
redo with more audio, so a caption that waited longer than ``caption_stale_s``
is cancelled rather than decoded (the stream's caption task ends as when the
turn stops; the next caption step decodes the turn so far). A request whose
future was cancelled (its session closed, its speculation dropped) is
dropped before it costs anything.

Why threads and not the event loop: CTranslate2 releases the GIL, so
``workers`` threads (CTranslate2's ``inter_threads``) decode at once, each on
``threads`` cores (``intra_threads``), while the event loop goes on.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from livegen.models.cascade import asr

logger = logging.getLogger(__name__)

#: Most utterances in one Whisper call: past this a batch costs about as much as its parts.
MAX_BATCH = 8
#: A caption that waited this long is stale: the next caption step will decode more audio anyway.
CAPTION_STALE_S = 1.0


class Priority(IntEnum):
    FINAL = 0
    CAPTION = 1


@dataclass(frozen=True, eq=False)  # compared by identity: the queue removes this very request
class Request:
    audio: np.ndarray
    options: asr.Options
    priority: Priority
    #: A ``str`` (the transcript), or for a scoring the ``asr.Logprob`` list.
    future: concurrent.futures.Future[Any]
    queued_at: float
    #: Set for a scoring: the transcript whose tokens are scored against ``audio``.
    text: str | None = None

    @property
    def key(self) -> tuple[bool, str, str, str, int]:
        """What items of one Whisper call must share."""
        seconds = len(self.audio) / asr.SAMPLE_RATE
        if self.text is not None:  # a scoring reads the first 30 s of any audio, with no prompt
            return (True, self.options.model, self.options.language, "", asr.window_for(seconds))
        window = asr.window_for(seconds) if seconds <= asr.WINDOWS_S[-1] else -1
        return (False, self.options.model, self.options.language, self.options.prompt, window)


@dataclass
class BatchStats:
    """What ``livegen bench voice-conversations`` reports on recognition."""

    #: Batches by their size.
    sizes: Counter[int] = field(default_factory=Counter)
    #: Seconds each decoded request waited in the queue, and each batch's decode took.
    waits: deque[float] = field(default_factory=lambda: deque(maxlen=5000))
    computes: deque[float] = field(default_factory=lambda: deque(maxlen=5000))
    num_captions_dropped: int = 0
    num_cancelled: int = 0

    def clear(self) -> None:
        self.sizes.clear()
        self.waits.clear()
        self.computes.clear()
        self.num_captions_dropped = self.num_cancelled = 0


class Batcher:
    """A priority queue of decodes and the worker threads that batch them."""

    def __init__(
        self,
        recognizer_for: Callable[[str], asr.Recognizer],
        record: Callable[[str, float, float], None] | None = None,
        max_batch: int = MAX_BATCH,
        workers: int = 1,
        caption_stale_s: float = CAPTION_STALE_S,
        stats: BatchStats | None = None,
    ) -> None:
        self._recognizer_for = recognizer_for
        #: Told (recogniser, seconds of audio, its share of the batch's compute) of each decode.
        self._record = record
        self.stats = stats or BatchStats()
        self.max_batch = max(1, max_batch)
        self.num_workers = max(1, workers)
        self.caption_stale_s = caption_stale_s
        self._queues: tuple[deque[Request], deque[Request]] = (deque(), deque())
        self._ready = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._is_closed = False

    def submit(
        self, audio: np.ndarray, options: asr.Options, priority: Priority = Priority.FINAL
    ) -> concurrent.futures.Future[str]:
        future: concurrent.futures.Future[str] = concurrent.futures.Future()
        with self._ready:
            if self._is_closed:
                future.cancel()
                return future
            self._queues[priority].append(Request(audio, options, priority, future, time.perf_counter()))
            self._ready.notify()
        return future

    def submit_score(
        self, audio: np.ndarray, text: str, options: asr.Options
    ) -> concurrent.futures.Future[Any]:
        """Score ``text``'s tokens against ``audio`` (a list of ``asr.Logprob``), as urgently as a final."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._ready:
            if self._is_closed:
                future.cancel()
                return future
            request = Request(audio, options, Priority.FINAL, future, time.perf_counter(), text)
            self._queues[Priority.FINAL].append(request)
            self._ready.notify()
        return future

    def start(self) -> Batcher:
        for index in range(self.num_workers - len(self._threads)):
            thread = threading.Thread(target=self._run, name=f"livegen-asr-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def close(self) -> None:
        """Stop the workers; what still waits is cancelled (a decode under way finishes)."""
        with self._ready:
            self._is_closed = True
            for queue in self._queues:
                while queue:
                    queue.popleft().future.cancel()
            self._ready.notify_all()

    def pending(self) -> int:
        with self._ready:
            return sum(len(queue) for queue in self._queues)

    def _run(self) -> None:
        while (batch := self._take()) is not None:
            if batch:
                self._decode(batch)

    def _take(self) -> list[Request] | None:
        """The next batch: the oldest final (else caption) and what can share its call."""
        with self._ready:
            while not self._is_closed and not any(self._queues):
                self._ready.wait()
            if self._is_closed:
                return None
            self._drop_cancelled()
            self._drop_stale_captions(time.perf_counter())
            head = next((queue[0] for queue in self._queues if queue), None)
            if head is None:
                return []
            batch: list[Request] = []
            for queue in self._queues:
                for request in [r for r in queue if r.key == head.key][: self.max_batch - len(batch)]:
                    queue.remove(request)
                    # Claims it; False if its session cancelled it just now: dropped, never decoded.
                    if request.future.set_running_or_notify_cancel():
                        batch.append(request)
                    else:
                        self.stats.num_cancelled += 1
            return batch

    def _drop_cancelled(self) -> None:
        """Requests of closed sessions and dropped guesses: they take no place in a batch."""
        for queue in self._queues:
            cancelled = [r for r in queue if r.future.cancelled()]
            for request in cancelled:
                queue.remove(request)
            self.stats.num_cancelled += len(cancelled)

    def _drop_stale_captions(self, now: float) -> None:
        captions = self._queues[Priority.CAPTION]
        while captions and now - captions[0].queued_at > self.caption_stale_s:
            captions.popleft().future.cancel()
            self.stats.num_captions_dropped += 1

    def _decode(self, batch: list[Request]) -> None:
        started = time.perf_counter()
        head = batch[0].options
        try:
            recognizer = self._recognizer_for(head.model)
            if batch[0].text is not None:
                texts = [r.text or "" for r in batch]
                results: list[Any] = recognizer.logprobs_batch([r.audio for r in batch], texts, head.language)
            else:
                transcripts = recognizer.transcribe_batch(
                    [r.audio for r in batch], head.language, head.prompt, [r.options.prefix for r in batch]
                )
                results = [t.text for t in transcripts]
        except Exception as exc:  # every session waiting on it hears of it, the workers go on
            logger.warning("speech recognition of a batch of %d failed: %s", len(batch), exc)
            for request in batch:
                request.future.set_exception(exc)
            return
        seconds = time.perf_counter() - started
        self.stats.sizes[len(batch)] += 1
        self.stats.waits.extend(started - r.queued_at for r in batch)
        self.stats.computes.append(seconds)
        for request, result in zip(batch, results, strict=True):
            if self._record is not None and request.text is None:
                self._record(recognizer.name, len(request.audio) / asr.SAMPLE_RATE, seconds / len(batch))
            request.future.set_result(result)
