"""``--world-workers`` without ``--ray-address`` starts a Ray of its own beside another Ray.

A private head (``ray start --head --block``, its own port and temp dir) runs
beside the test, and ``RAY_TMPDIR`` points at that temp dir, so the head is the
Ray that a bare ``ray.init()`` finds on this machine (as an operator's own
``ray start`` would be). The server must not join it: joining refuses the
CPUs it asks for, and the world workers never started.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from livegen.client.world import WorldClient
from livegen.server import ServerConfig
from livegen.server.thread import ServerThread

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def other_ray(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A running Ray head that a bare ``ray.init()`` here would join; yields its address."""
    system_temp = tempfile.mkdtemp(prefix="lgray")  # short: Ray's socket paths live under it
    temp_dir = os.path.join(system_temp, "ray")  # where ray.init() looks with RAY_TMPDIR set
    port = free_port()
    command = ["ray", "start", "--head", "--block", f"--port={port}", "--num-cpus=1"]
    command += ["--include-dashboard=false", f"--temp-dir={temp_dir}", "--disable-usage-stats"]
    head = subprocess.Popen(
        command,
        env={**os.environ, "RAY_TMPDIR": system_temp},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, ended as one in teardown
    )
    try:
        address_file = Path(temp_dir) / "ray_current_cluster"
        deadline = time.monotonic() + 120
        while not (address_file.exists() and address_file.read_text().strip()):
            assert head.poll() is None, "the private Ray head did not start"
            assert time.monotonic() < deadline, "the private Ray head did not start in 120 s"
            time.sleep(0.2)
        monkeypatch.setenv("RAY_TMPDIR", system_temp)
        yield address_file.read_text().strip()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGTERM)  # --block: the head stops the processes it started
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        shutil.rmtree(system_temp, ignore_errors=True)


async def test_world_workers_start_a_ray_of_their_own_beside_another_ray(other_ray: str) -> None:
    config = ServerConfig(api_key=None, voice_model="none", world_model="procedural-world", world_workers=1)
    with ServerThread(config) as server:
        server.wait_ready()
        assert ray.get_runtime_context().gcs_address != other_ray, "joined the Ray already running"
        async with await WorldClient.connect(server.ws_url) as client:
            await client.create(seed=3, prompt="forest", pacing="asap", output={"format": "png"})
            chunk = await client.next_chunk(wait_s=60)
        assert chunk.frames, "the session's first chunk, stepped by the Ray worker"
