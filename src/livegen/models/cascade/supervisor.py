"""One speech-worker process and the thread that supervises it: a slot of ``tts.Pool``.

Each ``Slot`` owns at most one ``tts_worker`` process at a time and a
supervisor thread that does all of the talking to it: it takes one job part
at a time from the pool, sends it, and waits for the answer under two clocks.
A *deadline* scaled to the text's length catches a synthesiser that hangs
while the process lives; *pings*, answered by the worker's reader thread even
mid-synthesis, catch a process that is stopped or frozen within seconds. A
worker that misses either, or dies, is killed; its one job fails with a
``SpeechWorkerError`` (the session that asked fails its response, no other
session notices), and the slot starts a fresh worker, backing off when
workers die young. Writes go to a non-blocking pipe from this thread only,
replies are read by a per-process reader thread: nothing here ever blocks an
event loop, and nothing waits forever on a worker.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import select
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from livegen.errors import ModelError
from livegen.models.cascade import wire
from livegen.models.cascade.speech_jobs import Job

logger = logging.getLogger("livegen.models.cascade")


class SpeechWorkerError(ModelError):
    """The speech worker running this job died or hung; the job is lost, the worker restarted."""

    code = "speech_worker_failed"


class SpeechWorkerStuck(SpeechWorkerError):
    """The speech worker stopped answering (a stopped process, a hung synthesiser)."""

    code = "speech_worker_stuck"


class Pool(Protocol):
    """The speech pool as a slot's supervisor uses it (``tts.Pool``, which starts the slots:
    declared here so that the two do not import each other)."""

    closing: threading.Event

    @property
    def is_closed(self) -> bool: ...
    def take(self, slot: Slot, timeout: float) -> tuple[Job, str] | None: ...
    def part_done(self, job: Job, reply: dict[str, Any], payload: bytes) -> None: ...
    def part_failed(self, job: Job, error: ModelError) -> None: ...


@dataclass(frozen=True)
class Timing:
    """The supervisor's clocks; tests shorten them."""

    #: An idle or busy worker is pinged this often.
    ping_every_s: float = 1.0
    #: A ping unanswered for this long means the process is stopped or frozen.
    liveness_s: float = 3.0
    #: A part's deadline is base + per character: Piper needs ~5 ms a character on a busy core.
    deadline_base_s: float = 10.0
    deadline_per_char_s: float = 0.05
    #: Loading Piper's voice takes about a second; a worker silent this long at start is broken.
    startup_s: float = 120.0
    #: Restarts of workers that died young wait this long, doubling up to the maximum.
    backoff_min_s: float = 0.5
    backoff_max_s: float = 30.0
    #: A worker that lived this long before failing is restarted at once.
    young_s: float = 10.0

    def deadline_s(self, text: str) -> float:
        return self.deadline_base_s + self.deadline_per_char_s * len(text)


class _Lost(Exception):
    """The worker failed; ``is_stuck`` when it hung rather than died."""

    def __init__(self, reason: str, is_stuck: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.is_stuck = is_stuck


#: Besides (process, header or None at the end of its pipe, payload) frames, the inbox gets this
#: nudge when a job is cancelled or the pool closes.
_WAKE = object()
_ids = itertools.count()


class Slot:
    def __init__(self, pool: Pool, index: int, argv: list[str], timing: Timing) -> None:
        self._pool = pool
        self.index = index
        self._argv = argv
        self._timing = timing
        self._inbox: queue.Queue[Any] = queue.Queue()
        self._process: subprocess.Popen[bytes] | None = None
        #: "starting", "ready", "busy", "restarting" or "closed"; ``reason`` says why when not serving.
        self.state = "starting"
        self.reason = ""
        self.engines: list[str] = []
        self.num_starts = 0
        #: Whose part the worker is speaking, while busy.
        self.owner: object = None
        self._thread = threading.Thread(target=self._run, name=f"tts-slot-{index}", daemon=True)

    # -- what the pool calls ------------------------------------------------------------------------

    def launch(self) -> subprocess.Popen[bytes]:
        """Start a worker process and its reader; ``handshake`` waits for its hello."""
        # A session of its own: a signal to the server's process group (Ctrl-C, systemd's stop)
        # must not kill it, or the slot would restart it while the server stops; the pool ends
        # it (end of input), and so does its parent's death.
        process = subprocess.Popen(
            self._argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=_child_env(),
            start_new_session=True,
        )
        assert process.stdin is not None
        os.set_blocking(process.stdin.fileno(), False)
        threading.Thread(target=self._read, args=(process,), name="tts-replies", daemon=True).start()
        return process

    def handshake(self, process: subprocess.Popen[bytes]) -> None:
        """Wait for the hello of a launched worker; raises ``ModelError`` and kills it if none comes."""
        deadline = time.monotonic() + self._timing.startup_s
        while True:
            try:
                item = self._inbox.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                code = discard(process)
                raise ModelError(
                    f"the speech worker did not start (no hello within {self._timing.startup_s} s; "
                    f"exit code {code})"
                ) from None
            if self._pool.is_closed:
                discard(process)
                raise ModelError("the speech workers are closed")
            if item is _WAKE or item[0] is not process:
                continue
            hello = item[1]
            if hello is None:
                code = discard(process)
                raise ModelError(f"the speech worker did not start (exit code {code})")
            break
        if not hello.get("engines"):
            discard(process)
            raise ModelError(f"the speech worker loaded no engine: {hello.get('errors')}")
        for name, error in hello.get("errors", {}).items():
            logger.warning("speech engine %s is unavailable: %s", name, error)
        self._process, self.engines = process, list(hello["engines"])
        self.num_starts += 1
        self.state, self.reason = "ready", ""

    def run(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._inbox.put(_WAKE)

    def close(self) -> None:
        self.state = "closed"
        self.wake()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        process, self._process = self._process, None
        if process is not None:
            _stop(process)

    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None else None

    # -- the supervisor thread ----------------------------------------------------------------------

    def _run(self) -> None:
        backoff = 0.0
        started = time.monotonic()
        while not self._pool.is_closed:
            if self._process is None:
                if not self._restart():
                    backoff = min(max(2 * backoff, self._timing.backoff_min_s), self._timing.backoff_max_s)
                    self._pool.closing.wait(backoff)
                    continue
                started = time.monotonic()
            taken = self._pool.take(self, timeout=self._timing.ping_every_s)
            try:
                if taken is None:
                    self._ping()
                else:
                    self._run_part(*taken)
            except Exception as exc:  # a bug here must cost a restart, never the slot
                if not isinstance(exc, _Lost):
                    logger.exception("speech worker %d: supervisor error", self.index)
                lost = exc if isinstance(exc, _Lost) else _Lost(f"was lost ({exc!r})", False)
                self._lose(lost, taken[0] if taken else None)
                if time.monotonic() - started < self._timing.young_s:
                    backoff = min(max(2 * backoff, self._timing.backoff_min_s), self._timing.backoff_max_s)
                    self._pool.closing.wait(backoff)
                else:
                    backoff = 0.0

    def _restart(self) -> bool:
        self.state = "restarting"
        try:
            self.handshake(self.launch())
        except (ModelError, OSError) as exc:
            self.reason = f"speech worker {self.index} failed to start ({exc}); retrying"
            logger.warning("%s", self.reason)
            return False
        logger.info("speech worker %d restarted (pid %s)", self.index, self.pid())
        return True

    def _run_part(self, job: Job, text: str) -> None:
        request_id = next(_ids)
        self.state, self.owner = "busy", job.owner
        job.future.add_done_callback(lambda _: self.wake())
        header = {"op": "speak", "id": request_id, "text": text, "engine": job.engine}
        self._send({**header, "voice": job.voice, "speed": job.speed})
        try:
            reply, payload = self._await(request_id, self._timing.deadline_s(text), job)
        finally:
            self.owner = None
        self.state = "ready"
        self._pool.part_done(job, reply, payload)

    def _ping(self) -> None:
        request_id = next(_ids)
        self._send({"op": "ping", "id": request_id})
        self._await(request_id, self._timing.liveness_s, None)

    def _send(self, header: dict[str, Any]) -> None:
        """Write a frame without ever blocking past the liveness clock (the pipe may be full)."""
        process = self._process
        assert process is not None and process.stdin is not None
        fd = process.stdin.fileno()
        data = memoryview(wire.encode_frame(header))
        deadline = time.monotonic() + self._timing.liveness_s
        while data:
            try:
                data = data[os.write(fd, data) :]
            except BlockingIOError:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not select.select([], [fd], [], remaining)[1]:
                    raise _Lost(f"took no input for {self._timing.liveness_s} s", True) from None
            except OSError as exc:
                raise _Lost(f"closed its input ({exc})", False) from None

    def _await(self, request_id: int, within_s: float, job: Job | None) -> tuple[dict[str, Any], bytes]:
        """The reply to ``request_id``, pinging meanwhile; raises ``_Lost`` on death or silence."""
        process = self._process
        now = time.monotonic()
        deadline = now + within_s
        ping_id: int | None = None
        next_ping, pong_due = now + self._timing.ping_every_s, float("inf")
        is_cancel_sent = False
        while True:
            now = time.monotonic()
            if self._pool.is_closed:
                raise _Lost("was closed", False)
            if now >= deadline:
                if job is None:  # this was a ping
                    raise _Lost(f"stopped answering pings for {within_s} s", True)
                raise _Lost(f"gave no answer within its deadline of {within_s:.1f} s", True)
            if now >= pong_due:
                raise _Lost(f"stopped answering pings for {self._timing.liveness_s} s", True)
            if job is not None and ping_id is None and now >= next_ping:
                ping_id = next(_ids)
                self._send({"op": "ping", "id": ping_id})
                pong_due = now + self._timing.liveness_s
            wait = min(deadline, pong_due, next_ping if ping_id is None and job else deadline) - now
            try:
                item = self._inbox.get(timeout=max(0.0, wait))
            except queue.Empty:
                continue
            if item is _WAKE:
                if job is not None and job.future.cancelled() and not is_cancel_sent:
                    self._send({"op": "cancel", "id": request_id})  # Piper stops at its next chunk
                    is_cancel_sent = True
                continue
            owner, header, payload = item
            if owner is not process:
                continue  # a late frame of a worker already replaced
            if header is None:
                raise _Lost(f"exited with code {process.wait() if process else None}", False)
            if header.get("id") == ping_id:
                ping_id, pong_due, next_ping = None, float("inf"), now + self._timing.ping_every_s
            elif header.get("id") == request_id:
                return header, payload

    def _lose(self, lost: _Lost, job: Job | None) -> None:
        """Kill the worker, fail its job, and say why until the next one is up."""
        process, self._process = self._process, None
        pid = process.pid if process is not None else None
        if self._pool.is_closed:
            self.state = "closed"
        else:
            self.state = "restarting"
            self.reason = f"speech worker {self.index} (pid {pid}) {lost.reason}; restarting"
            logger.warning("%s", self.reason)
        if process is not None:
            discard(process)
        if job is not None:
            error_type = SpeechWorkerStuck if lost.is_stuck else SpeechWorkerError
            self._pool.part_failed(job, error_type(f"the speech worker {lost.reason}"))

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        """The reader thread of one process: frames into the inbox, then None at the end."""
        assert process.stdout is not None
        try:
            while True:
                header, payload = wire.read_frame(process.stdout)
                self._inbox.put((process, header, payload))
        except (wire.FrameError, ValueError, OSError):
            pass
        finally:
            with contextlib.suppress(OSError):
                process.stdout.close()
        self._inbox.put((process, None, b""))


def _stop(process: subprocess.Popen[bytes]) -> None:
    """End a worker politely (end of input), then firmly."""
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        discard(process)


def discard(process: subprocess.Popen[bytes]) -> int:
    """Kill a worker (a stopped one too) and release its input; its exit code."""
    with contextlib.suppress(OSError):
        process.kill()
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()
    return process.wait()


def _child_env() -> dict[str, str]:
    """The environment for the worker: it must import this very copy of livegen."""
    root = str(Path(__file__).resolve().parents[3])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env
