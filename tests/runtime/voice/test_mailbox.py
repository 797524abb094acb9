"""The runner's single-consumer mailbox: FIFO order, backpressure, and no lost items."""

from __future__ import annotations

import asyncio

import pytest

from livegen.runtime.voice.mailbox import Mailbox


async def test_items_come_out_in_the_order_they_went_in() -> None:
    mailbox: Mailbox[int] = Mailbox()
    for item in range(5):
        mailbox.put_nowait(item)
    assert [await mailbox.get() for _ in range(5)] == [0, 1, 2, 3, 4]
    assert mailbox.empty()


async def test_a_waiting_get_wakes_on_put() -> None:
    mailbox: Mailbox[str] = Mailbox()
    getter = asyncio.create_task(mailbox.get())
    await asyncio.sleep(0)
    assert not getter.done()
    mailbox.put_nowait("a")
    assert await getter == "a"


async def test_a_full_mailbox_refuses_put_nowait_and_holds_put_until_a_get() -> None:
    mailbox: Mailbox[int] = Mailbox(2)
    mailbox.put_nowait(1)
    await mailbox.put(2)
    with pytest.raises(asyncio.QueueFull):
        mailbox.put_nowait(3)
    putters = [asyncio.create_task(mailbox.put(n)) for n in (3, 4)]
    await asyncio.sleep(0)
    assert not any(p.done() for p in putters)
    assert mailbox.get_nowait() == 1
    await asyncio.sleep(0)
    assert putters[0].done() and not putters[1].done()  # one slot: the first putter only
    assert [mailbox.get_nowait(), mailbox.get_nowait()] == [2, 3]
    await putters[1]
    assert mailbox.get_nowait() == 4


async def test_a_cancelled_putter_passes_its_turn_on() -> None:
    mailbox: Mailbox[int] = Mailbox(1)
    mailbox.put_nowait(0)
    first = asyncio.create_task(mailbox.put(1))
    second = asyncio.create_task(mailbox.put(2))
    await asyncio.sleep(0)
    mailbox.get_nowait()  # wakes the first putter ...
    first.cancel()  # ... which is cancelled before it runs
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert second.done()
    assert mailbox.get_nowait() == 2


async def test_wait_returns_at_its_time_and_takes_nothing() -> None:
    mailbox: Mailbox[int] = Mailbox()
    await asyncio.wait_for(mailbox.wait(0.01), 1.0)  # empty: wakes at its time
    waiter = asyncio.create_task(mailbox.wait(None))
    await asyncio.sleep(0)
    mailbox.put_nowait(7)
    await waiter
    cancelled = asyncio.create_task(mailbox.wait(None))
    await asyncio.sleep(0)
    cancelled.cancel()
    assert len(mailbox) == 1 and mailbox.get_nowait() == 7
    waiter = asyncio.create_task(mailbox.wait(None))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    mailbox.put_nowait(8)  # a cancelled wait leaves no stale waiter behind
    assert await mailbox.get() == 8


async def test_one_consumer_only() -> None:
    mailbox: Mailbox[int] = Mailbox()
    first = asyncio.create_task(mailbox.get())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError):
        await mailbox.get()
    first.cancel()
