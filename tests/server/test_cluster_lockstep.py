"""A lockstep (native duplex) model loaded once per cluster: its one frame clock in the cluster's
lockstep service (``cluster/lockstep.py``), shared by every server process.

Two server processes of ``moshi-tiny`` with two slots (``cluster_lockstep_models.py``) on Ray's
two-node test cluster: a session on each is stepped by the one service, the pool refuses a third
from either process, a killed process's slots come back, and a killed service ends its sessions
with ``lockstep_service_unavailable`` and serves new ones once Ray has restarted it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cluster_harness as harness
import httpx
import pytest
import websockets
from cluster_harness import OPENED, Cluster, RayNodes, free_port, health, recv, stop, wait_for

pytest.importorskip("ray")
pytest.importorskip("torch")
pytest.importorskip("transformers")

close_clients = pytest.fixture(autouse=True)(harness.close_clients)
ray_nodes = pytest.fixture(scope="module")(harness.ray_nodes)

HERE = Path(__file__).parent
MODEL = "moshi-two"
SERVICE = f"livegen-lockstep-{MODEL}"
#: One 80 ms frame of PCM16 at 24 kHz: what the model takes and gives per step.
FRAME_BYTES = 2 * 1920


@pytest.fixture(scope="module")
def lockstep_cluster(ray_nodes: RayNodes) -> Iterator[Cluster]:
    port = free_port()
    options = {
        "api_key": None,
        "voice_model": MODEL,
        "world_model": "none",
        "workers": 2,
        "port": port,
        "ray_address": ray_nodes.address,
        "drain_timeout_s": 1.0,
        # Admission by the slot pool only: a step slowed by a busy machine never refuses here.
        "duplex_realtime_headroom": 0.0,
    }
    command = [sys.executable, str(HERE / "cluster_lockstep_models.py"), json.dumps(options)]
    serve = subprocess.Popen(command, env=harness.env(), start_new_session=True)
    try:
        body = wait_for(port, lambda b: len(b["cluster"]["processes"]) >= 2, timeout=600)
        cluster = Cluster(port, body["cluster"]["group"], serve)
        ready(cluster)
        yield cluster
    finally:
        stop(serve)


def ready(cluster: Cluster) -> None:
    """Until two processes of the group are registered, each ready (its voice model connected)."""
    wait_for(cluster.port, lambda b: len(cluster.processes()) == 2, 600)
    for process in cluster.processes():
        wait_for(port_of(process), lambda b: True, 600)


def port_of(process: dict[str, Any]) -> int:
    return int(process["address"].rsplit(":", 1)[1])


def service(port: int) -> dict[str, Any]:
    """The lockstep service as a process's /health reports it ({} while none answers)."""
    with contextlib.suppress(httpx.HTTPError, KeyError):
        services = health(port).json()["cluster"]["services"]
        found = [s for s in services if s["name"] == SERVICE]
        return dict(found[0]) if found else {}
    return {}


def maps_torch(pid: int) -> bool:
    """Whether process ``pid`` has torch's library mapped (it loaded a torch model)."""
    return "libtorch" in Path(f"/proc/{pid}/maps").read_text()


async def until_service(port: int, ready: Any, tries: int = 300) -> dict[str, Any]:
    for _ in range(tries):
        found = await asyncio.to_thread(service, port)
        if found and ready(found):
            return found
        await asyncio.sleep(0.5)
    raise AssertionError(f"the lockstep service never got there: {found}")


async def open_moshi(address: str) -> tuple[Any, dict[str, Any]]:
    """A socket of the model and its first event (``session.created``, or the refusal)."""
    ws = await websockets.connect(f"{address}/v1/realtime?model={MODEL}")
    OPENED.append(ws)
    return ws, await recv(ws)


async def audio_frames(ws: Any, count: int) -> list[bytes]:
    """The model's first ``count`` audio deltas, while the user's audio keeps coming."""
    frames: list[bytes] = []
    quiet = base64.b64encode(bytes(FRAME_BYTES)).decode()
    for _ in range(2000):
        if len(frames) >= count:
            return frames
        await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": quiet}))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.08):
                while True:
                    event = json.loads(await ws.recv())
                    if event["type"] == "response.output_audio.delta":
                        frames.append(base64.b64decode(event["delta"]))
                    assert event["type"] != "error", event
    raise AssertionError(f"only {len(frames)} audio frames came")


async def until_error(ws: Any) -> dict[str, Any]:
    for _ in range(3000):
        event = await recv(ws)
        if event["type"] == "error":
            return dict(event["error"])
    raise AssertionError("no error came")


async def test_two_processes_share_one_model_and_its_slot_pool(lockstep_cluster: Cluster) -> None:
    processes = lockstep_cluster.processes()
    sockets = []
    for process in processes:  # a session on each process, answered by the one model
        ws, created = await open_moshi(process["address"])
        assert created["type"] == "session.created", created
        frames = await audio_frames(ws, 10)
        assert all(len(frame) == FRAME_BYTES for frame in frames)  # one 80 ms frame per step
        sockets.append(ws)
    ports = [port_of(p) for p in processes]
    reports = [await until_service(port, lambda s: s.get("sessions") == 2) for port in ports]
    assert reports[0]["pid"] == reports[1]["pid"] and reports[0]["steps"] > 0  # one clock, both sessions
    # One copy of the model in the cluster: in the service, none in a server process.
    assert maps_torch(reports[0]["pid"])
    assert not any(maps_torch(int(p["pid"])) for p in processes)
    # The pool (two slots) is the cluster's: a third session is refused on either process.
    for process in processes:
        ws, refused = await open_moshi(process["address"])
        assert refused["type"] == "error" and refused["error"]["code"] == "realtime_capacity", refused
    for ws in sockets:
        await ws.close()
    await until_service(ports[0], lambda s: s.get("sessions") == 0)


async def test_a_killed_process_gives_its_slots_back(lockstep_cluster: Cluster) -> None:
    doomed, other = lockstep_cluster.processes()
    for _ in range(2):  # the doomed process takes both slots
        ws, created = await open_moshi(doomed["address"])
        assert created["type"] == "session.created", created
        await audio_frames(ws, 2)
    ws, refused = await open_moshi(other["address"])
    assert refused["type"] == "error" and refused["error"]["code"] == "realtime_capacity", refused
    os.kill(int(doomed["pid"]), signal.SIGKILL)
    for _ in range(120):  # its members stop polling: the service frees their slots
        ws, first = await open_moshi(other["address"])
        if first["type"] == "session.created":
            break
        assert first["error"]["code"] == "realtime_capacity", first
        await asyncio.sleep(0.5)
    assert first["type"] == "session.created", first
    assert all(len(frame) == FRAME_BYTES for frame in await audio_frames(ws, 3))
    assert (await until_service(port_of(other), lambda s: s.get("orphans_freed", 0) >= 2))["sessions"] == 1
    await ws.close()
    ready(lockstep_cluster)  # the supervisor's new process, for the next test
    await until_service(port_of(other), lambda s: s.get("sessions") == 0)


async def test_a_killed_service_ends_its_sessions_and_serves_new_ones(lockstep_cluster: Cluster) -> None:
    processes = lockstep_cluster.processes()
    sockets = []
    for process in processes:
        ws, created = await open_moshi(process["address"])
        assert created["type"] == "session.created", created
        await audio_frames(ws, 2)
        sockets.append(ws)
    before = await until_service(port_of(processes[0]), lambda s: s.get("sessions") == 2)
    os.kill(before["pid"], signal.SIGKILL)
    for ws in sockets:  # each session ends, with the service's own code
        error = await until_error(ws)
        assert error["code"] == "lockstep_service_unavailable", error
        assert SERVICE in error["message"]
        with pytest.raises(websockets.ConnectionClosed):
            for _ in range(3000):
                await recv(ws)
    back = await until_service(port_of(processes[0]), lambda s: s.get("restarted") and s["ready"])
    assert back["pid"] != before["pid"]
    for process in processes:  # the servers went on: a new session on each is answered
        for _ in range(60):
            ws, created = await open_moshi(process["address"])
            if created["type"] == "session.created":
                break
            await asyncio.sleep(0.5)
        assert created["type"] == "session.created", created
        assert all(len(frame) == FRAME_BYTES for frame in await audio_frames(ws, 3))
        await ws.close()
