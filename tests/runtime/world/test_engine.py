"""The world engine without a transport: it opens, reconfigures and describes sessions.

The real procedural world model, scheduler, manager and runner; the sinks
record what a socket would be sent. The same over real sockets is in
``tests/server/test_world.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import msgspec
import pytest

from livegen.errors import InvalidRequest, InvalidState
from livegen.models import default_registry
from livegen.protocol import world as wire
from livegen.runtime.world.engine import WorldEngine, WorldSettings
from livegen.server.config import ServerConfig
from livegen.server.metrics import Metrics


def new_engine() -> WorldEngine:
    registry = default_registry()
    return WorldEngine(
        registry,
        registry.get("procedural-world"),
        WorldSettings(
            max_sessions=2,
            max_unsent_bytes=ServerConfig.max_unsent_bytes,
            realtime_headroom=ServerConfig.world_realtime_headroom,
        ),
    )


@pytest.fixture
async def engine() -> AsyncIterator[WorldEngine]:
    engine = new_engine()
    await engine.start()
    yield engine
    await engine.stop()


class Sinks:
    def __init__(self) -> None:
        self.texts: list[dict[str, object]] = []
        self.frames: list[bytes] = []
        self.errors: list[str] = []

    async def text(self, text: str) -> None:
        self.texts.append(msgspec.json.decode(text))

    async def data(self, data: bytes) -> None:
        self.frames.append(data)


def config(**fields: object) -> wire.SessionConfig:
    return msgspec.convert(fields, wire.SessionConfig)


async def test_sessions_wait_for_the_model() -> None:
    engine = new_engine()
    assert engine.health() == {"ready": False, "model": "procedural-world", "reason": "model loading"}
    with pytest.raises(InvalidState) as refused:
        await engine.open(config(), Sinks().text, Sinks().data, print)
    assert refused.value.code == "not_ready"


async def test_open_announces_the_session_and_reconfigure_keeps_what_made_the_world(
    engine: WorldEngine,
) -> None:
    sinks = Sinks()
    runner = await engine.open(config(seed=7, pacing="asap"), sinks.text, sinks.data, sinks.errors.append)
    try:
        async with asyncio.timeout(10):
            while not sinks.texts:  # noqa: ASYNC110 - the runner's sender task writes it
                await asyncio.sleep(0.01)
        created = sinks.texts[0]
        assert created["type"] == "session.created"
        session = engine.describe(runner)
        assert created["session"] == session
        assert session["seed"] == 7 and session["model"] == "procedural-world"
        assert engine.health()["sessions"] == 1
        with pytest.raises(InvalidRequest) as fixed:
            engine.reconfigure(runner, config(seed=8))
        assert fixed.value.param == "session.seed"
        engine.reconfigure(runner, config(output={"format": "png"}))
        assert engine.describe(runner)["output"] == {"format": "png", "quality": 85}
    finally:
        await runner.close(is_sending=False)
        runner.abort_sending()


async def test_a_session_update_naming_another_model_is_refused(engine: WorldEngine) -> None:
    with pytest.raises(InvalidRequest) as refused:
        engine.check_model(config(model="some-other-world"))
    assert refused.value.code == "model_not_found"
    engine.check_model(config(model="procedural-world"))


def test_the_settings_read_the_servers_options() -> None:
    config = ServerConfig(max_sessions=3, max_unsent_bytes=1234, world_max_spectators=5)
    settings = WorldSettings.of(config, None, webrtc=True)
    assert (settings.max_sessions, settings.max_unsent_bytes) == (3, 1234)
    assert settings.realtime_headroom == config.world_realtime_headroom
    assert settings.spectators is not None and settings.spectators.total == 5
    assert settings.spectators.max_unsent_bytes == 1234
    assert settings.transports == ("websocket", "webrtc")
    assert WorldSettings.of(config, None, webrtc=False).transports == ("websocket",)


class ScriptedLink:
    """A player's link that sends ``messages``, then waits until let go (``leave``)."""

    def __init__(self, *messages: str) -> None:
        self.inbox: asyncio.Queue[str | None] = asyncio.Queue()
        for message in messages:
            self.inbox.put_nowait(message)
        self.sent: list[dict[str, object]] = []
        self.closed: int | None = None
        self.created = asyncio.Event()

    async def send_text(self, text: str) -> None:
        self.sent.append(event := msgspec.json.decode(text))
        if event["type"] == "session.created":
            self.created.set()

    async def send_bytes(self, data: bytes) -> None:
        pass

    async def receive(self) -> str | None:
        return await self.inbox.get()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed = code
        self.inbox.put_nowait(None)


async def test_the_engine_serves_a_link_until_it_closes_and_stop_ends_the_rest() -> None:
    engine = new_engine()
    await engine.start()
    update = '{"type": "session.update", "session": {"pacing": "asap", "max_chunks_ahead": 1}}'
    leaving, staying = ScriptedLink(update), ScriptedLink(update)
    metrics = Metrics()
    served = [asyncio.create_task(engine.serve(link, metrics)) for link in (leaving, staying)]
    for link in (leaving, staying):
        await link.created.wait()
    assert len(engine.owners) == 2
    leaving.inbox.put_nowait(None)  # the client goes
    await served[0]
    assert len(engine.owners) == 1 and leaving.closed is None
    await engine.stop()  # the other session ends with the server: its link is closed
    await served[1]
    assert staying.closed == 1000 and not engine.owners
    await asyncio.gather(*served)
    # Nothing the engine started outlives its stop: no runner's sender, no scheduler loop.
    assert {task for task in asyncio.all_tasks() if task is not asyncio.current_task()} == set()
    assert metrics.sessions_open.labels(kind="world")._value.get() == 0
