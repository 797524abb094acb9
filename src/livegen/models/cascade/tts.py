"""livegen's side of the speech-synthesis worker: one subprocess, shared, restarted if it dies.

Piper and espeak-ng are GPL, so they live in ``tts_worker``'s process; this
module only starts it and trades ``wire`` frames with it. It is thread-based,
not asyncio-based, on purpose: one ``Worker`` serves every session of the
process, whatever event loop each runs on, and ``speak`` returns a
``concurrent.futures.Future`` that a stream awaits with ``asyncio.wrap_future``.
Cancelling that future tells the worker to skip the sentence if it has not
started it, so a barged-in answer stops costing CPU at once.

A reader thread resolves futures from the replies; when the pipe ends it
fails every pending future with ``ModelError`` and the next ``speak`` starts
a fresh worker.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import logging
import os
import selectors
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from livegen.errors import ModelError
from livegen.models.cascade import wire

logger = logging.getLogger("livegen.models.cascade")

SAMPLE_RATE = 24_000
#: Loading Piper's voice takes about a second; a worker silent for this long is stuck.
STARTUP_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Speech:
    pcm: bytes
    #: The engine that spoke: "piper", or "espeak" when Piper is not there.
    engine: str


class Worker:
    def __init__(self, engines: tuple[str, ...] = ("piper", "espeak"), threads: int = 1) -> None:
        self._argv = [
            sys.executable,
            "-m",
            "livegen.models.cascade.tts_worker",
            "--engines",
            ",".join(engines),
            "--threads",
            str(threads),
        ]
        self._lock = threading.Lock()
        self._ids = itertools.count()
        #: Request id -> (the worker it was sent to, its future).
        self._pending: dict[int, tuple[subprocess.Popen[bytes], concurrent.futures.Future[Speech]]] = {}
        self._process: subprocess.Popen[bytes] | None = None
        #: Engines the running worker loaded, preferred first.
        self.engines: list[str] = []
        #: Times the worker was started (1 + restarts).
        self.num_starts = 0
        with self._lock:
            self._start()

    def speak(
        self, text: str, engine: str = "piper", voice: str = "", speed: float = 1.0
    ) -> concurrent.futures.Future[Speech]:
        """Synthesise one sentence; the future's result is PCM16 at 24 kHz."""
        future: concurrent.futures.Future[Speech] = concurrent.futures.Future()
        request = {"op": "speak", "text": text, "engine": engine, "voice": voice, "speed": speed}
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._start()
            assert self._process is not None
            request["id"] = request_id = next(self._ids)
            self._pending[request_id] = (self._process, future)
            self._send(request)
        future.add_done_callback(lambda done: self._on_done(request_id, done))
        return future

    def close(self) -> None:
        with self._lock:
            process, self._process = self._process, None
        if process is None:
            return
        if process.stdin:
            with contextlib.suppress(BrokenPipeError):
                process.stdin.close()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def _start(self) -> None:
        """Start a worker and wait for its hello. Called with the lock held."""
        process = subprocess.Popen(
            self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_child_env()
        )
        assert process.stdout is not None
        try:
            if not _readable_within(process.stdout, STARTUP_TIMEOUT_S):
                raise wire.FrameError(f"no hello within {STARTUP_TIMEOUT_S} s")
            hello, _ = wire.read_frame(process.stdout)
        except wire.FrameError as exc:
            code = _discard(process)
            raise ModelError(f"the speech worker did not start ({exc}; exit code {code})") from exc
        if not hello.get("engines"):
            _discard(process)
            raise ModelError(f"the speech worker loaded no engine: {hello.get('errors')}")
        for name, error in hello.get("errors", {}).items():
            logger.warning("speech engine %s is unavailable: %s", name, error)
        self._process, self.engines = process, list(hello["engines"])
        self.num_starts += 1
        threading.Thread(target=self._read, args=(process,), name="tts-replies", daemon=True).start()

    def _send(self, header: dict[str, Any]) -> None:
        assert self._process is not None and self._process.stdin is not None
        try:
            wire.write_frame(self._process.stdin, header)
        except (BrokenPipeError, ValueError) as exc:
            # The reader thread fails the pending futures when it sees the pipe end.
            logger.warning("speech worker pipe is closed: %s", exc)

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        try:
            while True:
                header, payload = wire.read_frame(process.stdout)
                self._resolve(header, payload)
        except wire.FrameError:
            pass
        finally:
            process.stdout.close()
        self._fail_all(process)

    def _resolve(self, header: dict[str, Any], payload: bytes) -> None:
        with self._lock:
            entry = self._pending.pop(int(header.get("id", -1)), None)
        if entry is None or entry[1].done():
            return
        future = entry[1]
        try:
            if header.get("status") == "ok":
                future.set_result(Speech(payload, str(header.get("engine"))))
            elif header.get("status") == "error":
                future.set_exception(ModelError(f"speech synthesis failed: {header.get('error')}"))
            else:
                future.cancel()
        except concurrent.futures.InvalidStateError:
            pass  # cancelled by its caller meanwhile

    def _fail_all(self, process: subprocess.Popen[bytes]) -> None:
        code = process.wait()
        with self._lock:
            if self._process is process:
                self._process = None
            if process.stdin:
                with contextlib.suppress(OSError):
                    process.stdin.close()
            pending = [i for i, (owner, _) in self._pending.items() if owner is process]
            futures = [self._pending.pop(i)[1] for i in pending]
        if futures:
            logger.warning("speech worker exited with code %s; failing %d requests", code, len(futures))
        for future in futures:
            if not future.done():
                future.set_exception(ModelError(f"the speech worker exited with code {code}"))

    def _on_done(self, request_id: int, future: concurrent.futures.Future[Speech]) -> None:
        if not future.cancelled():
            return
        with self._lock:
            entry = self._pending.pop(request_id, None)
            if entry is not None and entry[0] is self._process:
                self._send({"op": "cancel", "id": request_id})


def _discard(process: subprocess.Popen[bytes]) -> int:
    """Kill a worker that never became usable and release its pipes; its exit code."""
    process.kill()
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    return process.wait()


def _readable_within(stream: IO[bytes], timeout_s: float) -> bool:
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        return bool(selector.select(timeout_s))


def _child_env() -> dict[str, str]:
    """The environment for the worker: it must import this very copy of livegen."""
    root = str(Path(__file__).resolve().parents[3])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env
