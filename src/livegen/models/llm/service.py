"""The embedded language model's worker, kept running: started, probed, restarted, reported.

One ``EmbeddedLLM`` per process and options (``shared``), whoever asks: the model is 1.8 GB of
memory and a core while it decodes, so every session of every server in the process shares it
(llama.cpp's ``parallel`` slots, each with its own prompt cache, answer that many at once; more
wait in llama.cpp's queue, and one waiting past ``--llm-first-token-timeout`` fails with
``llm_timeout``). Sessions reach it as an OpenAI-compatible endpoint on loopback (``base_url``),
so the cascade's one chat client, its deadlines and caps serve it as they serve ``--llm-base-url``.

A watchdog thread checks the worker every ``PROBE_EVERY_S``: a worker that exited, or whose
HTTP server has not answered ``/health`` within ``PROBE_TIMEOUT_S`` for ``HUNG_AFTER`` probes in a
row (a hang: stopped, deadlocked), is killed and started again on the same port. The responses
it was serving fail then, each with the chat client's code (``llm_failed`` for a broken stream,
``llm_timeout`` for a silent one), and nothing else does; ``health`` says it is restarting, how
often it has, and why, which ``/health`` reports.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from livegen.errors import ConfigError
from livegen.models.llm import weights as packaged

logger = logging.getLogger("livegen.models.llm")

PROBE_EVERY_S = 1.0
PROBE_TIMEOUT_S = 5.0
HUNG_AFTER = 3
#: How long a worker may take to load its model (Qwen: 3-4 s warm, a cold disk more).
START_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Options:
    """What the worker runs: the weights and their sizing (``--llm-threads``, ``--llm-context``,
    ``--llm-parallel``); the defaults suit a two-core laptop that also hears and speaks."""

    weights: packaged.Weights
    #: One decoding thread: the recogniser and the voice need the other core.
    threads: int = 1
    #: Tokens of context per slot (one session's conversation and answer).
    context: int = 4096
    #: Answers decoded at once; each slot caches its own session's prompt between turns.
    parallel: int = 2


class EmbeddedLLM:
    def __init__(self, options: Options) -> None:
        self.options = options
        self.restarts = 0
        self.last_error: str | None = None
        self.is_restarting = False
        self._port = 0
        self._process: subprocess.Popen[str] | None = None
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._watchdog: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/v1"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self) -> EmbeddedLLM:
        """Join and check the weights, start the worker and wait until it serves; then watch it."""
        self._model = str(packaged.model_file(self.options.weights))
        self._port = _free_port()
        self._spawn()
        self._watchdog = threading.Thread(target=self._watch, name="livegen-llm-watchdog", daemon=True)
        self._watchdog.start()
        return self

    def _spawn(self) -> None:
        options = {
            "model": self._model,
            "alias": self.options.weights.name,
            "threads": self.options.threads,
            "context": self.options.context,
            "parallel": self.options.parallel,
            "port": self._port,
        }
        command = [sys.executable, "-m", "livegen.models.llm.worker", json.dumps(options)]
        # A session of its own: the server's Ctrl-C is the server's to handle (it closes the
        # worker's stdin); the worker runs this checkout's livegen, as the speech workers do.
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=_child_env(),
            start_new_session=True,
        )
        ready = _read_ready(process)
        if ready is None:
            _end(process)
            raise ConfigError(f"the language model {self.options.weights.name} did not start")
        self._process = process

    def _watch(self) -> None:
        failures = 0
        while not self._closed.wait(PROBE_EVERY_S):
            process = self._process
            if process is None:
                continue
            if (code := process.poll()) is not None:
                self._restart(f"the language model's worker exited with code {code}")
                failures = 0
            elif not self._answers():
                failures += 1
                if failures >= HUNG_AFTER:
                    self._restart(f"the language model's worker did not answer for {failures} probes")
                    failures = 0
            else:
                failures = 0

    def _answers(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self._port), 2) as sock:
            sock.settimeout(PROBE_TIMEOUT_S)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            return sock.recv(64).startswith(b"HTTP/1.1 200")
        return False

    def _restart(self, reason: str) -> None:
        """Kill the worker (whatever state it is in) and start another, until one starts."""
        logger.warning("%s; restarting it", reason)
        with self._lock:
            self.is_restarting, self.last_error = True, reason
            self.restarts += 1
            if self._process is not None:
                _end(self._process)
            while not self._closed.is_set():
                try:
                    self._spawn()
                    break
                except (ConfigError, OSError) as exc:
                    self.last_error = f"{reason}; restarting failed: {exc}"
                    self._port = _free_port()  # the old port may be held by someone else now
                    self._closed.wait(PROBE_EVERY_S)
            self.is_restarting = False

    def health(self) -> dict[str, Any]:
        """What ``/health`` says of the language model."""
        state = "restarting" if self.is_restarting else "ready"
        return {
            "model": self.options.weights.name,
            "state": state,
            "pid": self.pid,
            "restarts": self.restarts,
            "last_error": self.last_error,
            "threads": self.options.threads,
            "context": self.options.context,
            "parallel": self.options.parallel,
        }

    @property
    def is_closed(self) -> bool:
        return self._closed.is_set()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            if self._process is not None:
                _end(self._process, gently=True)


def _end(process: subprocess.Popen[str], gently: bool = False) -> None:
    """End the worker and close its pipes: closing its stdin asks it to leave (``gently``), a
    kill ends one that is hung or stopped."""
    if gently:
        with contextlib.suppress(OSError):
            process.stdin.close()  # type: ignore[union-attr]
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(5)
    process.kill()
    process.wait()
    for pipe in (process.stdin, process.stdout):
        with contextlib.suppress(OSError):
            pipe.close()  # type: ignore[union-attr]


def _read_ready(process: subprocess.Popen[str]) -> str | None:
    """The worker's ``{"ready": url}`` line, or None if it ended or took past ``START_TIMEOUT_S``."""
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.append(process.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(START_TIMEOUT_S)
    if not found or not found[0].strip():
        return None
    try:
        return str(json.loads(found[0])["ready"])
    except (ValueError, KeyError, TypeError):
        return None


def _child_env() -> dict[str, str]:
    """The worker's environment: it imports this very copy of livegen (a checkout's src too)."""
    root = str(Path(__file__).resolve().parents[3])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


_shared: dict[Options, EmbeddedLLM] = {}
_sharing = threading.Lock()


def shared(options: Options) -> EmbeddedLLM:
    """The process's worker for ``options``, started on first use."""
    with _sharing:
        if options not in _shared or _shared[options].is_closed:
            _shared[options] = EmbeddedLLM(options).start()
        return _shared[options]


def close_all() -> None:
    with _sharing:
        for service in _shared.values():
            service.close()
        _shared.clear()
