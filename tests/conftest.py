"""Shared fixtures: a real livegen server on a free loopback port."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import settings

from livegen.models import Registry
from livegen.server import ServerConfig
from livegen.server.thread import ServerThread

settings.register_profile("default", deadline=None, max_examples=100)
settings.register_profile("ci", deadline=None, max_examples=300)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


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
