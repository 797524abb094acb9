"""Shared fixtures: a real livegen server on a free loopback port."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import settings

from livegen.models import Registry
from livegen.server import ServerConfig
from livegen.server.thread import ServerThread

#: Every server the suite starts, in this process or a subprocess (they inherit the variable),
#: answers with the built-in responder: the tests assert its exact answers, and loading the
#: embedded language model (``livegen[llm]``, installed with ``all``) would cost each server
#: seconds and a gigabyte. The embedded model's own tests ask for it by ``--llm``.
os.environ.setdefault("LIVEGEN_LLM", "builtin")
#: And hears with Whisper tiny.en, not the default base: the suite's spoken turns were written
#: against it, and base would cost every decode 2 to 2.6 times the compute on CI's two cores. A run
#: may set it to try the suite with another recogniser; the tests of the default unset it.
os.environ.setdefault("LIVEGEN_ASR_MODEL", "whisper-tiny.en")

settings.register_profile("default", deadline=None, max_examples=100)
settings.register_profile("ci", deadline=None, max_examples=300)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(autouse=True)
def livegen_logs_propagate() -> Iterator[None]:
    """Undo ``logs.configure`` after a test that ran it (``livegen serve``'s CLI path does).

    It stops the ``livegen`` logger propagating to the root, where pytest's
    ``caplog`` listens: every later test that counts log lines (tracebacks,
    refusals) would see none and pass or fail for the wrong reason.
    """
    logger = logging.getLogger("livegen")
    saved = logger.handlers[:], logger.propagate, logger.level
    yield
    logger.handlers[:], logger.propagate = saved[0], saved[1]
    logger.setLevel(saved[2])


@pytest.fixture
def start_server() -> Iterator[Callable[..., ServerThread]]:
    """Start servers with given config fields; all are stopped after the test."""
    started: list[ServerThread] = []

    def start(registry: Registry | None = None, **config: Any) -> ServerThread:
        config.setdefault("api_key", None)
        server = ServerThread(ServerConfig(**config), registry).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def server(start_server: Callable[..., ServerThread]) -> ServerThread:
    """A server with the default models; ready (models loaded) before the test runs."""
    running = start_server()
    running.wait_ready()
    return running
