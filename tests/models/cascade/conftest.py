"""Fixtures for the cascade's tests: the real model, loaded once, a local chat server, and a
server with the default voice model.

The model is session-scoped: loading Whisper and starting the speech worker
takes seconds on two shared cores, and the model is shared by sessions by
design, so tests share it too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from livegen.server.thread import ServerThread
from models.cascade.support import QWEN, ChatServer, serve_chat


@pytest.fixture(scope="session")
def cascade() -> Iterator[Any]:
    from livegen.models.cascade import model

    loaded = model.load()
    loaded.use_llm(None, None)  # the environment must not change what the tests see
    yield loaded
    loaded.close()


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    with serve_chat() as chat:
        yield chat


@pytest.fixture
def default_server(start_server: Callable[..., ServerThread]) -> ServerThread:
    """``livegen serve``'s app on a loopback port, its voice model left to the default (the cascade)."""
    server = start_server(world_model="none")
    server.wait_ready(timeout=120)
    return server


@pytest.fixture
def assistant(start_server: Callable[..., ServerThread], cascade: Any) -> Iterator[ServerThread]:
    """A server whose cascade answers with the embedded Qwen (set back to none after the test)."""
    cascade.use_embedded(QWEN)
    try:
        server = start_server(world_model="none")
        server.wait_ready(timeout=300)
        yield server
    finally:
        cascade.use_llm(None, None)  # the model is shared by every server of this process
