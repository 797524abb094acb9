"""Measure a language-model attack: the server's RSS growth and another session's wait.

Not a test (nothing here asserts a time): ``PYTHONPATH=src:tests python -m
models.cascade.llm_attacks giant_line`` (or ``endless_fragments``) serves
livegen with its default limits against ``ChatServer`` in this process. One
session asks the question that triggers the attack; another asks "How are
you?" again and again meanwhile. Printed: the RSS growth over the attack (peak
minus the start), the other session's waits (median and max), how the
attacked response ended, and how long the attack ran. The attack stops after
``ATTACK_S`` whatever the server does (the code before the limits never ends
it on its own). Point ``PYTHONPATH`` at an older checkout's ``src`` for the code
before.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import threading
import time
from typing import Any

from livegen.server import ServerConfig
from livegen.server.thread import ServerThread
from models.cascade import test_llm_faults as faults
from models.cascade.support import ChatServer, RealtimeCall, serve_chat
from models.cascade.test_tools import agent, ask, sdk

ATTACK_S = 20.0


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


class Peak(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = rss_mib()
        self.running = True

    def run(self) -> None:
        while self.running:
            self.peak = max(self.peak, rss_mib())
            time.sleep(0.05)


async def _waits(connection: Any, call: RealtimeCall, until: asyncio.Event) -> list[float]:
    waits: list[float] = []
    while not until.is_set() or not waits:
        mark = len(call.events)
        start = time.perf_counter()
        await ask(connection, "How are you?", output_modalities=["text"])
        await call.wait_for("response.done", within=120, after=mark)
        waits.append(time.perf_counter() - start)
    return waits


async def attack(server: ServerThread, chat: ChatServer, name: str) -> None:
    client = sdk(server)
    async with (
        client.realtime.connect(model="gpt-realtime") as victim,
        client.realtime.connect(model="gpt-realtime") as other,
    ):
        victim_call, other_call = RealtimeCall(victim), RealtimeCall(other)
        await agent(victim, victim_call)
        await agent(other, other_call)
        once = asyncio.Event()
        once.set()
        baseline = await _waits(other, other_call, once)  # one answer, before the attack
        before, peak = rss_mib(), Peak()
        peak.start()
        ended = asyncio.Event()
        started = time.perf_counter()
        await ask(victim, f"Please <{name}>", output_modalities=["text"])
        threading.Timer(ATTACK_S, chat.stopping.set).start()
        waits = asyncio.ensure_future(_waits(other, other_call, ended))
        try:
            done = await victim_call.wait_for("response.done", within=ATTACK_S + 30)
            outcome = f"{done.response.status} {getattr(done.response.status_details, 'error', None)}"
        except AssertionError:
            outcome = f"no response.done; session events: {victim_call.events[-1].type}"
        ran = time.perf_counter() - started
        ended.set()
        other_waits = await waits
        peak.running = False
        await victim_call.close()
        await other_call.close()
    print(f"attack {name}: ran {ran:.1f} s, ended: {outcome}")
    print(f"RSS: {before:.0f} MiB before, peak {peak.peak:.0f} MiB: +{peak.peak - before:.0f} MiB")
    print(f"other session without attack: {baseline[0] * 1000:.0f} ms")
    print(
        f"other session during attack: {len(other_waits)} answers, median "
        f"{statistics.median(other_waits) * 1000:.0f} ms, max {max(other_waits) * 1000:.0f} ms"
    )


def main(name: str) -> None:
    faults.MAX_ATTACK_BYTES = 1 << 40  # bounded by time instead
    with serve_chat() as chat:
        chat.reply = ["Fine, thanks."]
        chat.faults[f"<{name}>"] = faults.FAULTS[name][0]
        config = ServerConfig(api_key=None, world_model="none", llm_base_url=chat.url, llm_model="tiny")
        server = ServerThread(config).start()
        try:
            server.wait_ready(timeout=300)
            asyncio.run(attack(server, chat, name))
        finally:
            chat.stopping.set()
            server.stop()


if __name__ == "__main__":
    main(sys.argv[1])
