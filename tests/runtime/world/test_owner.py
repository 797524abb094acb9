"""The world session owner without a transport: a scripted link stands for the socket.

The owner (``runtime/world/owner.py``) is the engine's side of a world socket: it
decodes, dispatches (``world/lifecycle.py``), opens and closes the session and
counts its metrics. Here it serves a real procedural-world engine through a
``Link`` that is a queue in and a list out; the same over real sockets is in
``tests/server/test_world.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import msgspec
import pytest

from livegen.runtime.world.engine import WorldEngine
from livegen.runtime.world.owner import SessionOwner
from livegen.server.metrics import Metrics
from runtime.world.test_engine import new_engine


class ScriptedLink:
    """A socket that delivers what the test puts in and records what the owner sends."""

    def __init__(self) -> None:
        self.incoming: asyncio.Queue[str | bytes | None] = asyncio.Queue()
        self.texts: list[dict[str, object]] = []
        self.frames: list[bytes] = []
        self.closes: list[int] = []

    async def send_text(self, text: str) -> None:
        self.texts.append(msgspec.json.decode(text))

    async def send_bytes(self, data: bytes) -> None:
        self.frames.append(data)

    async def receive(self) -> str | bytes | None:
        return await self.incoming.get()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closes.append(code)

    def put(self, event: dict[str, object]) -> None:
        self.incoming.put_nowait(msgspec.json.encode(event).decode())

    async def next_of(self, kind: str) -> dict[str, object]:
        """The next message of type ``kind`` that arrived, waiting for it; earlier ones are dropped."""
        async with asyncio.timeout(10):
            while True:
                while self.texts:
                    if (text := self.texts.pop(0))["type"] == kind:
                        return text
                await asyncio.sleep(0.01)


@pytest.fixture
async def engine() -> AsyncIterator[WorldEngine]:
    engine = new_engine()
    await engine.start()
    yield engine
    await engine.stop()


def gauge(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def test_the_owner_serves_a_session_from_first_message_to_disconnect(engine: WorldEngine) -> None:
    link, metrics = ScriptedLink(), Metrics()
    owner = SessionOwner(engine, link, metrics)
    running = asyncio.create_task(owner.run())
    link.incoming.put_nowait(b"\x00")
    assert (await link.next_of("error"))["error"]["code"] == "invalid_request"  # type: ignore[index]
    link.put({"type": "chunk.ack", "chunk_index": 0})
    assert (await link.next_of("error"))["error"]["code"] == "session_not_created"  # type: ignore[index]
    link.put({"type": "session.update", "session": {"pacing": "asap", "max_chunks_ahead": 1}})
    await link.next_of("session.created")
    assert gauge(metrics, "livegen_sessions_open", kind="world") == 1
    link.put({"type": "session.close"})
    await link.next_of("session.closed")
    link.put({"type": "chunk.ack", "chunk_index": 0})  # moot after the close: no error
    link.put({"type": "session.update", "session": {}})
    assert (await link.next_of("error"))["error"]["code"] == "session_closed"  # type: ignore[index]
    assert gauge(metrics, "livegen_sessions_open", kind="world") == 0
    link.incoming.put_nowait(None)  # the client leaves
    async with asyncio.timeout(10):
        await running
    assert owner.runner is None and len(engine.manager or ()) == 0
    assert gauge(metrics, "livegen_errors_total", kind="world", code="session_closed") == 1
