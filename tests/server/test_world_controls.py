"""Control values over the wire (issue 30): bounded on entry, and one session's input fails only it.

The server serves ``controlled-world`` (``tests/world/controlled.py``): the real
keys, mouse and camera tracks, turned into numbers as causal Wan does. Before
the fix a ``mouse`` ``dx`` of a 400-digit integer passed the schema (a number
with no bound) and raised in the batched step, so every session batched with
it got ``chunk_failed``; and a ``keys`` event of 15,000 taps was taken.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from livegen.client.world import WorldClient
from livegen.models.world import Chunk, Tick
from livegen.protocol import world as wire
from livegen.server.thread import ServerThread
from livegen.server.world.service import WorldService
from world.controlled import registry


@pytest.fixture
def controlled_server(start_server: Callable[..., ServerThread]) -> ServerThread:
    server = start_server(registry=registry(), world_model="controlled-world", voice_model="none")
    server.wait_ready()
    return server


def mouse(data: str) -> str:
    """A world.event setting the mouse to ``data``, raw JSON (msgspec would not encode 10**400)."""
    control = f'{{"track": "mouse", "schema": "livegen.mouse.v1", "data": {data}}}'
    return f'{{"type": "world.event", "event_id": 1, "controls": [{control}]}}'


@pytest.mark.parametrize(
    "data",
    [
        '{"dx": 1' + "0" * 400 + "}",  # the value: an integer no float holds
        '{"dy": -9007199254740993}',  # past 2**53
        '{"dx": 1e6}',  # finite but beyond any pointer motion
        '{"wheel": 1e300}',
        '{"dx": 1e400}',  # JSON that overflows a double
    ],
)
async def test_an_unbounded_mouse_value_is_refused_on_entry_and_no_session_fails(
    controlled_server: ServerThread, data: str
) -> None:
    bystander = await WorldClient.connect(controlled_server.ws_url)
    client = await WorldClient.connect(controlled_server.ws_url)
    async with bystander, client:
        await bystander.create(pacing="asap")
        await client.create(pacing="asap")
        await client.send_raw(mouse(data))
        error = await client.next_event()
        assert isinstance(error, wire.Error), f"the value was taken: {error}"
        assert (error.error.code, error.error.event_id) == ("invalid_event", 1)
        await client.event(2, controls=[{"track": "mouse", "schema": "livegen.mouse.v1", "data": {"dx": 3}}])
        applied = await _chunk_applying(client, 2)
        assert applied.header.applied_event_ids == [2], "the session goes on, and takes the next event"
        for other in (client, bystander):
            first = (await other.next_chunk()).header.chunk_index
            assert (await other.next_chunk()).header.chunk_index == first + 1
            assert other.events.empty(), "no chunk_failed, no other error"


async def test_a_keys_event_of_thousands_of_taps_is_refused(controlled_server: ServerThread) -> None:
    client = await WorldClient.connect(controlled_server.ws_url)
    async with client:
        await client.create(pacing="asap", max_pending_events=1024)
        taps = ["a"] * 15_000  # the events (under 64 KiB): 512 of these froze the server for 50 s
        control = {"track": "keys", "schema": "livegen.keys.v1", "data": {"taps": taps}}
        await client.send({"type": "world.event", "event_id": 1, "controls": [control]})
        error = await client.next_event()
        assert isinstance(error, wire.Error), f"the event was taken: {error}"
        assert (error.error.code, error.error.param, error.error.event_id) == ("invalid_event", "controls", 1)
        assert "at most 64 items" in error.error.message
        control["data"] = {"taps": ["KeyW"] * 64, "down": ["KeyA"]}  # at the bound: taken
        assert (await client.event(2, controls=[control])).status == "accepted"
        assert (await _chunk_applying(client, 2)).header.applied_event_ids == [2]


async def _chunk_applying(client: WorldClient, event_id: int) -> Any:
    while True:
        chunk = await client.next_chunk()
        if event_id in chunk.header.applied_event_ids:
            return chunk


class Poisoned:
    """Wraps the served model's step: a batch holding a tick under the prompt ``poison`` raises, as a
    model does on an input it cannot take; each step takes a little time, so that sessions due
    meanwhile wait for the worker and go into the next step together."""

    def __init__(self, step: Callable[[Sequence[Tick], Any], list[Chunk]]) -> None:
        self.step = step
        self.lock = threading.Lock()
        #: Session ids of each batch that raised.
        self.failed: list[set[str]] = []

    def __call__(self, ticks: Sequence[Tick], kv_storage: Any) -> list[Chunk]:
        time.sleep(0.02)
        if any(tick.prompt == "poison" for tick in ticks):
            with self.lock:
                self.failed.append({tick.meta.session_id for tick in ticks})
            raise OverflowError("int too large to convert to float")
        return self.step(ticks, kv_storage)


@pytest.fixture
def poisoned(controlled_server: ServerThread) -> Iterator[Poisoned]:
    [service] = [s for s in controlled_server.app.state.livegen.services if isinstance(s, WorldService)]
    model = service.engine.model
    assert model is not None
    wrapper = Poisoned(model.step)
    model.step = wrapper  # type: ignore[method-assign]
    yield wrapper
    model.step = wrapper.step  # type: ignore[method-assign]


async def test_a_step_one_sessions_input_fails_fails_only_that_session(
    controlled_server: ServerThread, poisoned: Poisoned
) -> None:
    healthy = [await WorldClient.connect(controlled_server.ws_url) for _ in range(3)]
    culprit = await WorldClient.connect(controlled_server.ws_url)
    ids = [(await client.create(pacing="asap"))["id"] for client in healthy]
    await culprit.create(pacing="asap")
    for client in healthy:
        await client.next_chunk()
    await culprit.event(1, prompt="poison")
    error = await culprit.expect(wire.Error)
    assert error.error.code == "chunk_failed" and "int too large" in error.error.message
    assert poisoned.failed and poisoned.failed[0] & set(ids), "the culprit was stepped in a batch with others"
    for client in healthy:  # they go on: no error, chunks in order
        first = (await client.next_chunk()).header.chunk_index
        assert (await client.next_chunk()).header.chunk_index == first + 1
        assert client.events.empty(), [client.events.get_nowait() for _ in range(client.events.qsize())]
    await culprit.reset()
    assert (await culprit.next_chunk()).header.chunk_index == 0
    for client in (*healthy, culprit):
        await client.disconnect()
