"""livegen's side of speech synthesis: a pool of worker processes, shared fairly by sessions.

Piper and espeak-ng are GPL, so they live in ``tts_worker``'s processes;
this module only queues work for them, and ``supervisor`` talks to them.
``Pool.speak`` returns a ``concurrent.futures.Future`` at once (a stream on
any event loop awaits it with ``asyncio.wrap_future``); nothing here blocks
the caller.

Scheduling is what keeps one session from starving the others:

- a text is cut into parts of at most ``sentences.MAX_PIECE_CHARS``, and a
  worker takes one part at a time, so a cancel takes effect at the next part
  (and reaches the worker, whose Piper stops at its next chunk);
- each owner (a session) has at most one part in a worker at a time, and
  owners with work waiting are served round-robin, part by part;
- there are several workers (``--tts-workers``, by default the cores,
  at least 2 and at most 8), so one long answer never holds them all.

A worker that dies or hangs fails only the job it was running, with a
``SpeechWorkerError``; ``health`` says which worker is restarting and why.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Hashable
from typing import Any

from livegen.errors import ModelError
from livegen.models.cascade import sentences
from livegen.models.cascade.speech_jobs import Job, Speech
from livegen.models.cascade.supervisor import Slot, SpeechWorkerError, SpeechWorkerStuck, Timing, discard

SAMPLE_RATE = 24_000
#: Most workers started by default, whatever the core count: each holds about 190 MB (Piper loaded).
MAX_DEFAULT_WORKERS = 8


class SynthesisError(ModelError):
    """The engine could not say this text (a bad voice, say); the worker is fine."""

    code = "speech_synthesis_failed"


def default_workers() -> int:
    """Workers when the settings name no count (``settings.CascadeSettings.tts_workers``)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(2, min(cores, MAX_DEFAULT_WORKERS))


class Pool:
    def __init__(
        self,
        engines: tuple[str, ...] = ("piper", "espeak"),
        threads: int = 1,
        size: int | None = None,
        timing: Timing | None = None,
    ) -> None:
        argv = [sys.executable, "-m", "livegen.models.cascade.tts_worker"]
        argv += ["--engines", ",".join(engines), "--threads", str(threads)]
        self._cond = threading.Condition()
        #: Owners with parts waiting, in round-robin order (a dict keeps insertion order).
        self._waiting: dict[Hashable, deque[Job]] = {}
        #: Owners with a part in a worker.
        self._busy: set[Hashable] = set()
        self.closing = threading.Event()
        #: Parts the workers answered (spoken, failed or cancelled), for tests and benchmarks.
        self.num_parts = 0
        timing = timing or Timing()
        self.slots = [Slot(self, index, argv, timing) for index in range(size or default_workers())]
        launched = [slot.launch() for slot in self.slots]  # the workers load in parallel
        try:
            for slot, process in zip(self.slots, launched, strict=True):
                slot.handshake(process)
        except ModelError:
            for process in launched:  # the ones not adopted yet are nobody's to close
                discard(process)
            self.close()
            raise
        for slot in self.slots:
            slot.run()

    @property
    def is_closed(self) -> bool:
        return self.closing.is_set()

    @property
    def engines(self) -> list[str]:
        """Engines the workers loaded, preferred first."""
        return next((slot.engines for slot in self.slots if slot.engines), [])

    @property
    def num_starts(self) -> int:
        """Worker processes started so far (the pool's size, plus restarts)."""
        return sum(slot.num_starts for slot in self.slots)

    def speak(
        self,
        text: str,
        engine: str = "piper",
        voice: str = "",
        speed: float = 1.0,
        owner: Hashable | None = None,
    ) -> concurrent.futures.Future[Speech]:
        """Synthesise ``text`` for ``owner`` (None: a job of its own); the result is PCM16 at 24 kHz.

        Cancelling the future drops the parts not yet spoken and stops the one being spoken.
        """
        parts = deque(sentences.bound(text) or [text])
        job = Job(object() if owner is None else owner, parts, engine, voice, speed)
        with self._cond:
            if self.is_closed:
                job.future.set_exception(ModelError("the speech workers are closed"))
                return job.future
            self._waiting.setdefault(job.owner, deque()).append(job)
            self._cond.notify()
        return job.future

    def health(self) -> tuple[bool, str, list[dict[str, Any]]]:
        """Whether every worker serves, why not, and each worker's state."""
        workers = [
            {"index": s.index, "state": s.state, "pid": s.pid(), "starts": s.num_starts, "reason": s.reason}
            for s in self.slots
        ]
        reasons = [s.reason for s in self.slots if s.state not in ("ready", "busy")]
        return not reasons, "; ".join(reasons), workers

    def pid(self) -> int | None:
        """The first worker's process id."""
        return self.slots[0].pid() if self.slots else None

    def pids(self) -> list[int | None]:
        return [slot.pid() for slot in self.slots]

    def close(self) -> None:
        with self._cond:
            self.closing.set()
            waiting = [job for jobs in self._waiting.values() for job in jobs]
            self._waiting.clear()
            self._cond.notify_all()
        for slot in self.slots:
            slot.close()
        for job in waiting:
            _fail(job, ModelError("the speech workers are closed"))

    # -- what the slots call ------------------------------------------------------------------------

    def take(self, slot: Slot, timeout: float) -> tuple[Job, str] | None:
        """The next part for ``slot``, fairly; None after ``timeout`` with nothing to do."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while (job := self._pick()) is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.is_closed:
                    return None
                self._cond.wait(remaining)
            return job, job.parts.popleft()

    def part_done(self, job: Job, reply: dict[str, Any], payload: bytes) -> None:
        status = reply.get("status")
        if status == "ok":
            job.pcm.append(payload)
            job.engine_used = job.engine_used or str(reply.get("engine"))
            if not job.parts:
                _succeed(job, Speech(b"".join(job.pcm), job.engine_used))
        elif status == "error":
            _fail(job, SynthesisError(f"speech synthesis failed: {reply.get('error')}"))
        else:
            job.future.cancel()
        self._release(job)

    def part_failed(self, job: Job, error: ModelError) -> None:
        _fail(job, error)
        self._release(job)

    def _release(self, job: Job) -> None:
        """The owner's part is out of the worker: its next part waits its turn behind other owners."""
        with self._cond:
            self.num_parts += 1
            self._busy.discard(job.owner)
            if job.parts and not job.future.done() and not self.is_closed:
                jobs = self._waiting.pop(job.owner, deque())
                jobs.appendleft(job)
                self._waiting[job.owner] = jobs
            self._cond.notify_all()

    def _pick(self) -> Job | None:
        """The first job of the first owner in turn with none in a worker. Called with the lock held."""
        for owner in list(self._waiting):
            jobs = self._waiting[owner]
            while jobs and jobs[0].future.done():  # cancelled while waiting
                jobs.popleft()
            if not jobs:
                del self._waiting[owner]
                continue
            if owner in self._busy:
                continue
            job = jobs.popleft()
            del self._waiting[owner]
            if jobs:
                self._waiting[owner] = jobs  # to the back of the round
            self._busy.add(owner)
            return job
        return None


def _succeed(job: Job, speech: Speech) -> None:
    if not job.future.done():
        with contextlib.suppress(concurrent.futures.InvalidStateError):  # cancelled by its caller meanwhile
            job.future.set_result(speech)


def _fail(job: Job, error: ModelError) -> None:
    if not job.future.done():
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            job.future.set_exception(error)


__all__ = ["Pool", "Speech", "SpeechWorkerError", "SpeechWorkerStuck", "SynthesisError", "Timing"]
