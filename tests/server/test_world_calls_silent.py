"""A world call whose caller stops reading (issue 37, not yet attacked: never-reading world calls).

A caller process connects a world call over loopback, starts its session and
is then stopped (SIGSTOP): it reads neither RTP nor its channel and sends no
RTCP. Before, the server went on encoding its frames (0.22 cores a call,
measured) until ICE's consent checks failed 30 s later; now a track whose
frames draw no receiver report for ``RECEIVER_SILENT_S`` ends its call
(``receiver_silent``), while a reading caller beside it plays on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from livegen.client.world_call import WorldCaller
from livegen.server.config import ServerConfig
from livegen.server.thread import ServerThread
from livegen.server.webrtc.world_calls import RECEIVER_SILENT_S

SRC = Path(__file__).resolve().parents[2] / "src"
SESSION = {"seed": 1, "prompt": "a forest room", "frames_per_chunk": 1, "max_chunks_ahead": 1}
CALLER = f"""
import asyncio, sys
from livegen.client.world_call import WorldCaller
async def main():
    caller = WorldCaller(sys.argv[1])
    await caller.connect()
    caller.send({{"type": "session.update", "session": {SESSION!r}}})
    await caller.frames_from(0, 4)
    print("PLAYING", flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""


@pytest.fixture
def world_server() -> Iterator[ServerThread]:
    # Admission by measured speed is off (headroom 0): on a busy machine it may refuse the second
    # caller, and what this test watches is a silent caller's end, not capacity.
    config = ServerConfig(
        api_key=None, world_model="tiny-world", voice_model="none", world_realtime_headroom=0.0
    )
    with ServerThread(config) as server:
        server.wait_ready(timeout=120)
        yield server


@pytest.fixture
def caller_process(world_server: ServerThread) -> Iterator[subprocess.Popen[str]]:
    """A caller in a process of its own, so that it can be stopped."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-c", CALLER, world_server.http_url]
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) as process:
        try:
            yield process
        finally:
            os.kill(process.pid, signal.SIGCONT)
            process.kill()


async def test_a_stopped_caller_is_let_go_and_a_reading_one_plays_on(
    world_server: ServerThread, caller_process: subprocess.Popen[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="livegen")
    stopped = caller_process
    reader = WorldCaller(world_server.http_url)
    try:
        assert stopped.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(stopped.stdout.readline), 120)
        assert line.strip() == "PLAYING"
        await reader.connect()
        reader.send({"type": "session.update", "session": {**SESSION, "seed": 2}})
        await reader.frames_from(0, 4)
        os.kill(stopped.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 120  # a bound against a hang, not a speed figure
        while not any(r.getMessage() == "world_call.receiver_silent" for r in caplog.records):
            assert time.monotonic() < deadline, "the stopped caller's call was never let go"
            await asyncio.sleep(0.1)
        # The reading caller was never silent: it still plays, well past the silence allowed.
        played = len(reader.frames)
        await asyncio.sleep(RECEIVER_SILENT_S + 1)
        assert len(reader.frames) > played + 16
        closed = [getattr(r, "fields", {}) for r in caplog.records if r.getMessage() == "world_call.closed"]
        assert [fields.get("reason") for fields in closed] == ["receiver_silent"], closed
    finally:
        await reader.close()
