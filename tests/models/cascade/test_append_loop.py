"""A long append to the cascade runs its speech detector off the event loop (issue 18, item 10)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from livegen.models.voice import StreamConfig


async def test_a_long_append_lets_other_tasks_run_meanwhile(cascade: Any) -> None:
    stream = await cascade.open("sess_long_append", StreamConfig())
    noise = np.random.default_rng(0).normal(0, 3000, cascade.input_rate * 20).astype("<i2").tobytes()
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before = ticks
    await stream.append(0, noise)  # 20 s of audio: hundreds of detector frames
    during = ticks - before
    stop.set()
    await task
    await stream.aclose()
    # Inline, the append would hold the loop throughout and the ticker would not run at all.
    assert during > 10
