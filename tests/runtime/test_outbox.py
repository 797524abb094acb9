"""The one outbox both runners and the spectators write through (``runtime/outbox.py``)."""

from __future__ import annotations

import asyncio

import pytest

from livegen.runtime.outbox import Bounds, Outbox
from livegen.tasks import TaskSet


class Socket:
    """A socket that writes when let: ``gate`` closed holds every write."""

    def __init__(self) -> None:
        self.written: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail = False

    async def write(self, item: str) -> None:
        await self.gate.wait()
        if self.fail:
            raise ConnectionResetError("gone")
        self.written.append(item)


async def test_items_are_written_in_order_and_their_bytes_go_once_written() -> None:
    outbox: Outbox[str] = Outbox()
    socket = Socket()
    socket.gate.clear()
    tasks = TaskSet()
    tasks.spawn(outbox.send_all(socket.write))
    for item in ("a", "bb", "ccc"):
        assert outbox.put(item, len(item))
    await asyncio.sleep(0)
    assert outbox.num_bytes == 6 and len(outbox) == 3  # the one being written still counts
    socket.gate.set()
    await outbox.drained()
    assert socket.written == ["a", "bb", "ccc"]
    assert outbox.num_bytes == 0 and len(outbox) == 0
    await tasks.aclose()


def test_an_item_past_the_count_bound_is_refused_and_nothing_changes() -> None:
    outbox: Outbox[str] = Outbox(Bounds(items=2))
    assert outbox.put("a", 1) and outbox.put("b", 1)
    assert not outbox.put("c", 1)
    assert outbox.items() == ["a", "b"] and outbox.num_bytes == 2
    assert outbox.put("c", 1, reserve=1)  # a reserve lets control events past the bound
    assert not outbox.put("d", 1, reserve=1)


@pytest.mark.parametrize("lone_item_passes", [False, True])
def test_the_byte_bound_and_the_lone_item_rule(lone_item_passes: bool) -> None:
    outbox: Outbox[str] = Outbox(Bounds(bytes=10, lone_item_passes=lone_item_passes))
    assert outbox.put("x" * 11, 11) is lone_item_passes  # alone, past the bound
    outbox.clear()
    assert outbox.put("x" * 6, 6)
    assert not outbox.put("y" * 5, 5)  # 11 > 10: refused whatever the rule (something waits)
    assert outbox.put("y" * 4, 4)  # exactly the bound
    assert outbox.num_bytes == 10


def test_drop_and_clear_free_bytes_at_once() -> None:
    outbox: Outbox[str] = Outbox()
    for item in ("a1", "b1", "a2", "c1"):
        outbox.put(item, len(item))
    assert outbox.drop(lambda item: item.startswith("a")) == 2
    assert outbox.items() == ["b1", "c1"] and outbox.num_bytes == 4
    assert outbox.clear() == ["b1", "c1"] and outbox.num_bytes == 0 and len(outbox) == 0


async def test_an_item_dropped_while_it_is_written_is_not_counted_twice() -> None:
    outbox: Outbox[str] = Outbox()
    socket = Socket()
    socket.gate.clear()
    tasks = TaskSet()
    tasks.spawn(outbox.send_all(socket.write))
    outbox.put("a", 1)
    outbox.put("b", 1)
    await asyncio.sleep(0)  # "a" is being written
    outbox.drop(lambda item: item == "a")
    assert outbox.num_bytes == 1
    socket.gate.set()
    await outbox.drained()
    assert socket.written == ["a", "b"] and outbox.num_bytes == 0
    await tasks.aclose()


async def test_close_writes_what_is_queued_then_the_sender_returns_and_later_items_are_ignored() -> None:
    outbox: Outbox[str] = Outbox()
    socket = Socket()
    outbox.put("a", 1)
    outbox.put("b", 1)
    outbox.close()
    assert outbox.put("late", 4)  # ignored: the session is ending
    await outbox.send_all(socket.write)  # returns: closed and empty
    assert socket.written == ["a", "b"] and outbox.is_closed and len(outbox) == 0


async def test_a_failed_write_clears_the_outbox_and_raises() -> None:
    outbox: Outbox[str] = Outbox()
    socket = Socket()
    socket.fail = True
    outbox.put("a", 1)
    outbox.put("b", 1)
    with pytest.raises(ConnectionResetError):
        await outbox.send_all(socket.write)
    assert len(outbox) == 0 and outbox.num_bytes == 0
    await outbox.drained()  # nothing is left to wait for


async def test_a_cancelled_sender_leaves_the_queue_for_its_owner() -> None:
    outbox: Outbox[str] = Outbox()
    socket = Socket()
    socket.gate.clear()
    tasks = TaskSet()
    tasks.spawn(outbox.send_all(socket.write))
    outbox.put("a", 1)
    outbox.put("b", 1)
    await asyncio.sleep(0)
    await tasks.aclose()
    assert outbox.items() == ["a", "b"]  # a last write by the owner may still take them


async def test_charge_resizes_the_item_being_written() -> None:
    outbox: Outbox[str] = Outbox(Bounds(bytes=100))

    async def write(item: str) -> None:
        outbox.charge(50)  # encoded: bigger than queued
        assert outbox.num_bytes == 60
        outbox.charge(-60)  # written in parts

    outbox.put("raw", 10)
    outbox.close()
    await outbox.send_all(write)
    assert outbox.num_bytes == 0


async def test_a_task_set_cancels_and_awaits_every_task_it_holds() -> None:
    tasks = TaskSet()
    ended: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(name)

    first = tasks.spawn(forever("a"))
    tasks.spawn(forever("b"))
    await asyncio.sleep(0)
    assert len(tasks) == 2
    await tasks.aclose()
    assert sorted(ended) == ["a", "b"] and first.cancelled() and len(tasks) == 0
    done = tasks.spawn(asyncio.sleep(0))
    await done
    await asyncio.sleep(0)  # its done callbacks run
    assert len(tasks) == 0  # a task that ended is let go
