"""Stopping, draining and counting across a cluster's processes: a process group's signal, a
supervisor killed outright, duplex resumes counted as resumes and attached while draining, an
owner that takes connections but never answers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from typing import Any

import cluster_harness as harness
import pytest
import websockets
from cluster_harness import (
    MAX_SESSIONS,
    OPENED,
    Cluster,
    drop,
    duplex,
    free_port,
    health,
    open_voice,
    recv,
    resume,
    start_serve,
    stop,
    until,
    wait_for,
)

pytest.importorskip("ray")

pytestmark = pytest.mark.cluster  # starts Ray: out of the fast tier

close_clients = pytest.fixture(autouse=True)(harness.close_clients)
ray_nodes = pytest.fixture(scope="module")(harness.ray_nodes)
cluster = pytest.fixture(scope="module")(harness.cluster)


# --- stopping, draining and counting across processes -------------------------------------------


def held_sessions(cluster: Cluster) -> int:
    report = health(cluster.port).json()["cluster"]
    return int(report["sessions"].get(cluster.group, {}).get("voice", 0))


async def test_a_full_server_still_takes_duplex_resumes(cluster: Cluster) -> None:
    """A duplex resume (its session named in its first message) is counted as a resume, never
    refused for room, through its owner or relayed from the other process; a new duplex session
    is still refused when the server is full."""
    one, other = cluster.processes()
    parked: list[dict[str, Any]] = []
    for _ in range(2):
        ws = await duplex(one["address"], {"type": "session.update", "session": {}})
        parked.append(await until(ws, "session.created", []))
        await drop(ws)
    for _ in range(50):  # the dropped sockets give their room back
        if held_sessions(cluster) == 0:
            break
        await asyncio.sleep(0.1)
    for _ in range(MAX_SESSIONS):
        await open_voice(f"ws://127.0.0.1:{cluster.port}")
    for created, process in zip(parked, (one, other), strict=True):
        first = {"type": "session.resume", "session_id": created["session"]["id"]}
        first |= {"resume_token": created["resume_token"], "last_received_server_event_seq": 1}
        resumed = await recv(await duplex(process["address"], first))
        assert resumed["type"] == "session.resumed", resumed
    refused = await duplex(other["address"], {"type": "session.update", "session": {}})
    assert (await recv(refused))["error"]["code"] == "too_many_sessions"
    while OPENED:  # the room comes back for the tests after this one
        await OPENED.pop().close()
    for _ in range(100):
        if held_sessions(cluster) == 0:
            break
        await asyncio.sleep(0.1)


async def test_an_owner_that_never_answers_is_refused_as_busy_not_unknown(cluster: Cluster) -> None:
    """A stopped process takes connections (its kernel does) and answers none: through the other
    process a call's attach and a resume are refused once the relay has waited for it, with
    owner_busy and close 1013 (retry), not as unknown ids, and never hung. (An owner that is gone
    is refused as unknown: test_cluster.py's killed process.)"""
    pytest.importorskip("aiortc")
    one, other = cluster.processes()
    os.kill(one["pid"], signal.SIGSTOP)
    try:
        attach, late = await asyncio.gather(
            refusal(f"{other['address']}/v1/realtime?call_id=rtc_{one['tag']}0000", None),
            refusal(f"{other['address']}/v1/realtime?session_id=sess_{one['tag']}0000", "token"),
        )
    finally:
        os.kill(one["pid"], signal.SIGCONT)
    for (error, code), what in ((attach, "call"), (late, "session")):
        assert error["code"] == "owner_busy" and what in error["message"], error
        assert code == 1013


async def refusal(url: str, token: str | None) -> tuple[dict[str, Any], int | None]:
    """The error a socket is refused with, and its close code (a resume sends its event first)."""
    ws = await websockets.connect(url, open_timeout=30)
    OPENED.append(ws)
    if token is not None:
        session_id = url.rpartition("=")[2]
        await ws.send(json.dumps({"type": "session.resume", "session_id": session_id, "resume_token": token}))
    error = (await recv(ws))["error"]
    with contextlib.suppress(websockets.ConnectionClosed):
        await asyncio.wait_for(ws.recv(), 10)
    return error, ws.close_code


async def test_a_sigterm_to_the_whole_process_group_still_drains() -> None:
    """Ctrl-C in a terminal and systemd's stop signal the server's whole process group: the
    server processes get one SIGTERM, through the supervisor, and drain, while the local Ray (out
    of that group) and its coordinator live on for them; the server then exits, and ends Ray."""
    psutil = pytest.importorskip("psutil")
    port = free_port()
    serve = start_serve(port=port, drain_timeout_s=3.0, workers=2)
    ray_processes: list[Any] = []
    try:
        body = wait_for(port, lambda b: len(b["cluster"]["processes"]) == 2)
        servers = {p["pid"] for p in body["cluster"]["processes"]}
        # out of the group the signal goes to: the supervisor alone passes it on, once
        assert all(os.getpgid(pid) != serve.pid for pid in servers)
        descendants = psutil.Process(serve.pid).children(recursive=True)
        ray_processes = [p for p in descendants if p.pid not in servers]
        assert any(p.name() == "raylet" for p in ray_processes)
        live, _seen = await open_voice(f"ws://127.0.0.1:{port}")
        os.killpg(serve.pid, signal.SIGTERM)
        draining = await until_draining(port)
        # the coordinator answers the draining processes (its Ray did not die with the signal)
        assert "processes" in draining["cluster"], draining
        # the live session goes on while the server drains...
        await live.send(json.dumps({"type": "response.create"}))
        assert (await until(live, "response.done", []))["response"]["status"] == "completed"
        assert "processes" in health(port).json()["cluster"]
        # ...until the drain timeout, when it ends with its terminal event
        closed = await until(live, "session.closed", [])
        assert closed.get("reason") == "server_shutdown"
        assert serve.wait(60) == 0
        for process in ray_processes:  # and no Ray process is left behind
            for _ in range(100):
                if is_gone(process.pid):
                    break
                await asyncio.sleep(0.1)
            else:
                pytest.fail(f"Ray's {process.name()} ({process.pid}) outlived the server")
    finally:
        stop(serve)
        for process in ray_processes:
            with contextlib.suppress(psutil.Error):
                process.kill()


async def until_draining(port: int) -> dict[str, Any]:
    """``/health`` once the server drains (503 ``draining``)."""
    for _ in range(200):
        answer = health(port)
        if answer.status_code == 503:
            body: dict[str, Any] = answer.json()
            assert body["status"] == "draining", body
            return body
        await asyncio.sleep(0.05)
    pytest.fail("the server did not start draining")


def test_speech_workers_are_out_of_the_servers_process_group() -> None:
    """A signal to the server's process group must not reach the cascade's speech workers: their
    slots would restart them while the server stops ("closed its input ... restarting")."""
    tts = pytest.importorskip("livegen.models.cascade.tts")
    pool = tts.Pool(engines=("espeak",), size=1)
    try:
        (pid,) = pool.pids()
        assert pid is not None and os.getpgid(pid) != os.getpgrp()
    finally:
        pool.close()


def is_gone(pid: int) -> bool:
    """Ended (a zombie not yet reaped by init counts as ended)."""
    psutil = pytest.importorskip("psutil")
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def test_server_processes_end_with_a_supervisor_killed_outright() -> None:
    """Out of the supervisor's process group, they would otherwise serve on, orphaned; and so
    would its Ray's processes, out of that group too."""
    psutil = pytest.importorskip("psutil")
    port = free_port()
    serve = start_serve(port=port, workers=2)
    pids: list[int] = []
    try:
        wait_for(port, lambda b: len(b["cluster"]["processes"]) == 2)
        pids = [p.pid for p in psutil.Process(serve.pid).children(recursive=True)]
        serve.kill()
        serve.wait()
        for pid in pids:
            for _ in range(600):
                if is_gone(pid):
                    break
                time.sleep(0.1)
            else:
                pytest.fail(f"process {pid} ({psutil.Process(pid).name()}) outlived its supervisor")
    finally:
        stop(serve)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


async def test_a_duplex_resume_attaches_while_the_server_drains() -> None:
    """As a ``?session_id=`` resume does: a drain refuses new sessions, never resumes; a duplex
    socket says which it is in its first message, so a new one is refused then (server_draining)."""
    port = free_port()
    serve = start_serve(port=port, drain_timeout_s=30.0)
    try:
        wait_for(port, lambda b: True)
        address = f"ws://127.0.0.1:{port}"
        await open_voice(address)  # a live session: the drain waits for it
        ws = await duplex(address, {"type": "session.update", "session": {}})
        created = await until(ws, "session.created", [])
        await drop(ws)
        os.kill(serve.pid, signal.SIGTERM)
        for _ in range(100):
            if health(port).status_code == 503:
                break
            await asyncio.sleep(0.05)
        first = {"type": "session.resume", "session_id": created["session"]["id"]}
        first |= {"resume_token": created["resume_token"], "last_received_server_event_seq": 1}
        resumed = await recv(await duplex(address, first))
        assert resumed["type"] == "session.resumed", resumed
        refused = await duplex(address, {"type": "session.update", "session": {}})
        assert (await recv(refused))["error"]["code"] == "server_draining"
    finally:
        stop(serve)


async def test_a_drain_keeps_parked_sessions_resumable_until_its_timeout() -> None:
    """A SIGTERM with only a parked session left (its client dropped) does not end it at once:
    the drain waits for it as for a live one, so a client that comes back during the drain
    resumes, and its session then ends with the drain (server_shutdown)."""
    port = free_port()
    serve = start_serve(port=port, drain_timeout_s=8.0)
    try:
        wait_for(port, lambda b: True)
        address = f"ws://127.0.0.1:{port}"
        ws, before = await open_voice(address)
        session_id, token = before[0]["session"]["id"], before[0]["resume_token"]
        await drop(ws)
        wait_for(port, lambda b: b["services"]["voice"]["parked_sessions"] == 1, timeout=20)
        os.kill(serve.pid, signal.SIGTERM)
        await until_draining(port)
        back = await resume(address, session_id, token, last_seq=len(before))
        assert (await recv(back))["type"] == "session.resumed"
        await back.send(json.dumps({"type": "response.create"}))
        assert (await until(back, "response.done", []))["response"]["status"] == "completed"
        closed = await until(back, "session.closed", [])
        assert closed.get("reason") == "server_shutdown"
        serve.wait(60)  # then the server exits (uvicorn ends by raising the SIGTERM it drained on)
    finally:
        stop(serve)
