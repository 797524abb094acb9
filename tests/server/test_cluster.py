"""Many server processes on one Ray cluster (``--workers``, ``--ray-address``), and the drain.

Real processes: ``livegen serve``'s supervisor (``server/workers.py``, started
through ``cluster_models.py`` so that it serves the scripted voice and the
procedural world) with two server processes on one port, joined to a Ray
cluster of two nodes (Ray's own ``cluster_utils.Cluster``, in a process of its
own: Ray's threads stay out of the tests' process). Each process also
listens on a private port, which its ``/health`` names; the tests drive each
process through its own private port, so which one a connection reaches is
never left to the kernel, and resumes owned by the other process are relayed.
The drain test runs a single process without Ray.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from livegen.client.world import WorldClient

HERE = Path(__file__).parent
#: The cluster's server-wide --max-sessions (each process alone would admit this many).
MAX_SESSIONS = 3
OPENED: list[Any] = []

pytest.importorskip("ray")


@pytest.fixture(autouse=True)
async def close_clients() -> AsyncIterator[None]:
    yield
    while OPENED:
        with contextlib.suppress(Exception):
            await OPENED.pop().close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def env() -> dict[str, str]:
    paths = [str(HERE.parents[1] / "src"), str(HERE.parent), str(HERE)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def start_serve(**config: Any) -> subprocess.Popen[bytes]:
    """A ``livegen serve`` (workers.run) of the test models, in its own process group."""
    options = {"api_key": None, "voice_model": "scripted-voice", "world_model": "procedural-world", **config}
    command = [sys.executable, str(HERE / "cluster_models.py"), json.dumps(options)]
    return subprocess.Popen(command, env=env(), start_new_session=True)


def health(port: int) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)


def wait_for(port: int, ready: Any, timeout: float = 180.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            answer = health(port)
            if answer.status_code == 200 and ready(body := answer.json()):
                return dict(body)
        time.sleep(0.3)
    raise RuntimeError("the servers did not become ready")


def stop(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


class Cluster:
    """The supervisor's port and its processes' private addresses, by tag."""

    def __init__(self, port: int, group: str, serve: subprocess.Popen[bytes]) -> None:
        self.port, self.group, self.serve = port, group, serve

    def processes(self) -> list[dict[str, Any]]:
        report = health(self.port).json()["cluster"]
        return [p for p in report["processes"] if p["group"] == self.group]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    nodes = subprocess.Popen(
        [sys.executable, str(HERE / "cluster_models.py"), "--ray-cluster"],
        env=env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert nodes.stdin is not None and nodes.stdout is not None
    address = nodes.stdout.readline().strip()
    port = free_port()
    serve = start_serve(
        workers=2, port=port, ray_address=address, max_sessions=MAX_SESSIONS, drain_timeout_s=1.0
    )
    try:
        body = wait_for(port, lambda b: len(b["cluster"]["processes"]) == 2)
        yield Cluster(port, body["cluster"]["group"], serve)
    finally:
        stop(serve)
        nodes.stdin.close()  # the cluster shuts down
        nodes.wait(60)
        nodes.stdout.close()


async def recv(ws: Any) -> dict[str, Any]:
    return dict(json.loads(await asyncio.wait_for(ws.recv(), 20)))


async def until(ws: Any, kind: str, into: list[dict[str, Any]]) -> dict[str, Any]:
    while True:
        event = await recv(ws)
        into.append(event)
        if event["type"] == kind:
            return event


async def open_voice(address: str) -> tuple[Any, list[dict[str, Any]]]:
    ws = await websockets.connect(f"{address}/v1/realtime?model=scripted-voice")
    OPENED.append(ws)
    seen: list[dict[str, Any]] = []
    await until(ws, "session.created", seen)
    return ws, seen


async def start_answer(address: str) -> tuple[Any, list[dict[str, Any]]]:
    ws, seen = await open_voice(address)
    await ws.send(json.dumps({"type": "response.create"}))
    for _ in range(3):
        await until(ws, "response.output_audio.delta", seen)
    return ws, seen


async def resume(address: str, session_id: str, token: str, last_seq: int) -> Any:
    ws = await websockets.connect(f"{address}/v1/realtime?session_id={session_id}")
    OPENED.append(ws)
    message = {"type": "session.resume", "session_id": session_id, "resume_token": token}
    await ws.send(json.dumps({**message, "last_event_seq": last_seq}))
    return ws


async def drop(ws: Any) -> None:
    """Lose the connection without a close frame, as a network drop does."""
    ws.transport.abort()
    with contextlib.suppress(Exception):
        await ws.wait_closed()


def audio_bytes(events: list[dict[str, Any]]) -> int:
    deltas = [e["delta"] for e in events if e["type"] == "response.output_audio.delta"]
    return sum(len(base64.b64decode(delta)) for delta in deltas)


async def test_a_session_opened_on_one_process_resumes_through_the_other(cluster: Cluster) -> None:
    one, other = cluster.processes()
    ws, before = await start_answer(one["address"])
    session_id, token = before[0]["session"]["id"], before[0]["resume_token"]
    assert session_id[5:9] == one["tag"]  # the owner is in the id
    await drop(ws)
    ws2 = await resume(other["address"], session_id, token, last_seq=len(before))
    greeting = await recv(ws2)
    assert greeting["type"] == "session.resumed", greeting
    assert greeting["last_event_seq"] == len(before)
    after: list[dict[str, Any]] = []
    await until(ws2, "response.done", after)
    stream = before + after
    assert [e["type"] for e in stream].count("response.done") == 1
    assert len({e["event_id"] for e in stream}) == len(stream)  # nothing twice
    assert audio_bytes(stream) == 2 * 24 * 1500  # the scripted answer whole: nothing missing
    # the session goes on through the relay: a client event reaches it and is answered
    await ws2.send(json.dumps({"type": "response.cancel", "event_id": "c1"}))
    assert (await until(ws2, "error", []))["error"]["code"] == "response_cancel_not_active"
    await ws2.close()


async def test_a_token_resumes_once_when_two_resumes_race_on_two_processes(cluster: Cluster) -> None:
    one, other = cluster.processes()
    ws, before = await start_answer(one["address"])
    session_id, token = before[0]["session"]["id"], before[0]["resume_token"]
    await drop(ws)
    racers = await asyncio.gather(
        *(resume(p["address"], session_id, token, len(before)) for p in (one, other))
    )
    firsts = [await recv(racer) for racer in racers]
    assert sorted(first["type"] for first in firsts) == ["error", "session.resumed"]


async def duplex(address: str, first: dict[str, Any]) -> Any:
    """A vllm-omni duplex socket (``?duplex=1``): it opens or resumes with its first message."""
    ws = await websockets.connect(f"{address}/v1/realtime?duplex=1&model=scripted-voice&autostart=0")
    OPENED.append(ws)
    await ws.send(json.dumps(first))
    return ws


async def test_a_duplex_session_resumes_through_the_other_process(cluster: Cluster) -> None:
    """Its session id is in its first message, not the URL: the process that reads it relays it."""
    one, other = cluster.processes()
    ws = await duplex(one["address"], {"type": "session.update", "session": {"sample_rate_hz": 16_000}})
    created = await until(ws, "session.created", [])
    session_id, token = created["session"]["id"], created["resume_token"]
    assert session_id[5:9] == one["tag"]
    await ws.send(json.dumps({"type": "response.create"}))
    before = [created]
    for _ in range(3):
        await until(ws, "response.output_audio.delta", before)
    await drop(ws)
    last = before[-1]["server_event_seq"]
    resume = {"type": "session.resume", "session_id": session_id, "resume_token": token}
    ws2 = await duplex(other["address"], {**resume, "last_received_server_event_seq": last})
    resumed = await recv(ws2)
    assert resumed["type"] == "session.resumed" and resumed["session"]["id"] == session_id, resumed
    after: list[dict[str, Any]] = []
    await until(ws2, "response.done", after)
    seqs = [e["server_event_seq"] for e in before + after if "server_event_seq" in e]
    assert seqs == sorted(set(seqs)), "nothing twice, in order"
    assert [e["type"] for e in before + after].count("response.done") == 1
    await ws2.send(json.dumps({"type": "response.cancel", "event_id": "c1"}))
    assert (await until(ws2, "error", []))["error"]["code"] == "response_cancel_not_active"
    # the token was spent on the owner: a second resume through either process is refused
    for process in (other, one):
        again = await duplex(process["address"], {**resume, "last_received_server_event_seq": last})
        assert (await recv(again))["type"] == "error"


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
        resume = {"type": "session.resume", "session_id": created["session"]["id"]}
        resume |= {"resume_token": created["resume_token"], "last_received_server_event_seq": 1}
        resumed = await recv(await duplex(process["address"], resume))
        assert resumed["type"] == "session.resumed", resumed
    refused = await duplex(other["address"], {"type": "session.update", "session": {}})
    assert (await recv(refused))["error"]["code"] == "too_many_sessions"
    while OPENED:  # the room comes back for the tests after this one
        await OPENED.pop().close()
    for _ in range(100):
        if held_sessions(cluster) == 0:
            break
        await asyncio.sleep(0.1)


async def test_a_calls_attach_and_hangup_reach_the_process_that_holds_it(cluster: Cluster) -> None:
    """A WebRTC call stays where its media flows; its id names that process, so an attach and a
    hangup through the other process are relayed there."""
    pytest.importorskip("aiortc")
    from livegen.client.webrtc import Caller

    one, other = cluster.processes()
    other_http = other["address"].replace("ws", "http", 1)
    caller = Caller(one["address"].replace("ws", "http", 1), None)
    try:
        await caller.connect()
        created = await caller.event("session.created")
        assert caller.call_id is not None and caller.call_id[4:8] == one["tag"]
        assert created["session"]["id"][5:9] == one["tag"]
        backend = await websockets.connect(f"{other['address']}/v1/realtime?call_id={caller.call_id}")
        OPENED.append(backend)
        item = {
            "type": "message",
            "id": "item_b",
            "role": "user",
            "content": [{"type": "input_text", "text": "hi"}],
        }
        await backend.send(json.dumps({"type": "conversation.item.create", "item": item}))
        assert (await until(backend, "conversation.item.added", []))["item"]["id"] == "item_b"
        await caller.wait_for(
            lambda e: e["type"] == "conversation.item.added" and e["item"]["id"] == "item_b"
        )
        async with httpx.AsyncClient() as http:
            unknown = await http.post(f"{other_http}/v1/realtime/calls/rtc_nobody/hangup")
            answer = await http.post(f"{other_http}/v1/realtime/calls/{caller.call_id}/hangup")
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "call_not_found"
        assert answer.status_code == 200, answer.text
        assert (await caller.event("session.closed", within=10))["reason"] == "hangup"
    finally:
        await caller.close()


async def test_max_sessions_holds_for_all_processes_together(cluster: Cluster) -> None:
    """Through the shared port (the kernel picks the process): the cap is the server's, not each
    process's, so the one past it is refused wherever it lands."""
    public = f"ws://127.0.0.1:{cluster.port}"
    for _ in range(MAX_SESSIONS):
        await open_voice(public)
    refused = await websockets.connect(f"{public}/v1/realtime?model=scripted-voice")
    OPENED.append(refused)
    assert (await recv(refused))["error"]["code"] == "too_many_sessions"
    while OPENED:  # ending them gives their room back
        await OPENED.pop().close()
    for _ in range(50):
        with contextlib.suppress(Exception):
            ws, _seen = await open_voice(public)
            await ws.close()
            return
        await asyncio.sleep(0.1)
    pytest.fail("the room of closed sessions never came back")


async def test_a_key_minted_on_one_process_opens_a_session_on_the_other(cluster: Cluster) -> None:
    one, other = cluster.processes()
    minting = "http" + one["address"][2:] + "/v1/realtime/client_secrets"
    async with httpx.AsyncClient() as http:
        answer = await http.post(minting, json={"session": {"type": "realtime", "instructions": "be brief"}})
    key = answer.json()["value"]
    headers = {"Authorization": f"Bearer {key}"}
    ws = await websockets.connect(f"{other['address']}/v1/realtime", additional_headers=headers)
    OPENED.append(ws)
    seen: list[dict[str, Any]] = []
    created = await until(ws, "session.created", seen)
    assert created["session"]["id"][5:9] == other["tag"]
    await ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime"}}))
    updated = await until(ws, "session.updated", seen)
    assert updated["session"]["instructions"] == "be brief"  # the key's configuration, learnt
    unknown = {"Authorization": "Bearer ek_never_minted"}
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(f"{other['address']}/v1/realtime", additional_headers=unknown)
    assert refused.value.response.status_code == 401


async def test_an_owner_that_cannot_be_reached_is_answered_as_for_an_unknown_id(cluster: Cluster) -> None:
    """A stopped process takes no connection: through the other process a call's attach is
    refused with call_not_found, as for a call no process holds, and a resume with
    session_not_found, never hung."""
    pytest.importorskip("aiortc")
    one, other = cluster.processes()
    os.kill(one["pid"], signal.SIGSTOP)
    try:
        attach = await websockets.connect(f"{other['address']}/v1/realtime?call_id=rtc_{one['tag']}0000")
        OPENED.append(attach)
        assert (await recv(attach))["error"]["code"] == "call_not_found"
        late = await resume(other["address"], f"sess_{one['tag']}000000000000", "token", last_seq=1)
        assert (await recv(late))["error"]["code"] == "session_not_found"
    finally:
        os.kill(one["pid"], signal.SIGCONT)


async def world_chunks(client: WorldClient, count: int) -> list[Any]:
    return [(await client.next_chunk(wait_s=30)).header for _ in range(count)]


async def test_killing_one_process_ends_only_its_sessions(cluster: Cluster) -> None:
    one, other = cluster.processes()
    doomed, doomed_seen = await open_voice(one["address"])
    doomed_duplex = await duplex(one["address"], {"type": "session.update", "session": {}})
    duplex_created = await until(doomed_duplex, "session.created", [])
    survivor, _seen = await open_voice(other["address"])
    world = await WorldClient.connect(other["address"])
    created = await world.create(seed=3, pacing="realtime")
    chunk_ms = 1000 * created["frames_per_chunk"] / created["fps"]
    headers = await world_chunks(world, 3)
    os.kill(one["pid"], signal.SIGKILL)
    with pytest.raises(websockets.ConnectionClosed):  # its client sees the socket close
        while True:
            await asyncio.wait_for(doomed.recv(), 20)
    headers += await world_chunks(world, 8)
    # the world session on the other process kept its frame clock: every chunk, none restarted
    assert [h.chunk_index for h in headers] == list(range(len(headers)))
    assert [h.media_time_ms for h in headers] == [i * chunk_ms for i in range(len(headers))]
    await world.close()
    await world.disconnect()
    # the other process's voice session goes on
    await survivor.send(json.dumps({"type": "response.create"}))
    assert (await until(survivor, "response.done", []))["response"]["status"] == "completed"
    # and a resume of the dead process's session is refused, not hung
    session_id, token = doomed_seen[0]["session"]["id"], doomed_seen[0]["resume_token"]
    late = await resume(other["address"], session_id, token, last_seq=1)
    assert (await recv(late))["error"]["code"] == "session_not_found"
    # a duplex one too (the relay finds no owner): vllm-omni's code for a session that is gone
    resume_duplex = {"type": "session.resume", "session_id": duplex_created["session"]["id"]}
    resume_duplex |= {"resume_token": duplex_created["resume_token"], "last_received_server_event_seq": 1}
    late_duplex = await duplex(other["address"], resume_duplex)
    assert (await recv(late_duplex))["error"]["code"] == "session_resume_expired"


@pytest.mark.parametrize("workers", [1, 2])
async def test_sigterm_drains_then_ends_the_rest_with_server_shutdown(workers: int) -> None:
    """One process, or the supervisor of two with its own local Ray, which passes SIGTERM on."""
    port = free_port()
    serve = start_serve(port=port, drain_timeout_s=3.0, workers=workers)
    try:
        wait_for(port, lambda b: workers == 1 or len(b["cluster"]["processes"]) == workers)
        live, _seen = await open_voice(f"ws://127.0.0.1:{port}")
        os.kill(serve.pid, signal.SIGTERM)
        for _ in range(100):
            if health(port).status_code == 503:
                break
            await asyncio.sleep(0.05)
        answer = health(port)
        assert answer.status_code == 503 and answer.json()["status"] == "draining"
        with pytest.raises(websockets.InvalidStatus) as refused:
            await websockets.connect(f"ws://127.0.0.1:{port}/v1/realtime?model=scripted-voice")
        assert refused.value.response.status_code == 503
        # the live session goes on while the server drains...
        await live.send(json.dumps({"type": "response.create"}))
        assert (await until(live, "response.done", []))["response"]["status"] == "completed"
        # ...until the drain timeout, when it ends with its terminal event
        closed = await until(live, "session.closed", [])
        assert closed.get("reason") == "server_shutdown"
        assert serve.wait(30) is not None
    finally:
        stop(serve)


async def test_a_sigterm_to_the_whole_process_group_still_drains() -> None:
    """Ctrl-C in a terminal and systemd's stop signal the server's whole process group (Ray's own
    processes too): the server processes get one SIGTERM, through the supervisor, and drain; the
    server then exits (no call waits on the Ray that died with the signal)."""
    port = free_port()
    serve = start_serve(port=port, drain_timeout_s=3.0, workers=2)
    try:
        body = wait_for(port, lambda b: len(b["cluster"]["processes"]) == 2)
        # out of the group the signal goes to: the supervisor alone passes it on, once
        assert all(os.getpgid(p["pid"]) != serve.pid for p in body["cluster"]["processes"])
        live, _seen = await open_voice(f"ws://127.0.0.1:{port}")
        os.killpg(serve.pid, signal.SIGTERM)
        # the live session goes on while the server drains...
        await live.send(json.dumps({"type": "response.create"}))
        assert (await until(live, "response.done", []))["response"]["status"] == "completed"
        # ...until the drain timeout, when it ends with its terminal event
        closed = await until(live, "session.closed", [])
        assert closed.get("reason") == "server_shutdown"
        assert serve.wait(60) == 0
    finally:
        stop(serve)


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
    """Out of the supervisor's process group, they would otherwise serve on, orphaned."""
    port = free_port()
    serve = start_serve(port=port, workers=2)
    pids: list[int] = []
    try:
        body = wait_for(port, lambda b: len(b["cluster"]["processes"]) == 2)
        pids = [p["pid"] for p in body["cluster"]["processes"]]
        serve.kill()
        serve.wait()
        for pid in pids:
            for _ in range(600):
                if is_gone(pid):
                    break
                time.sleep(0.1)
            else:
                pytest.fail(f"server process {pid} outlived its supervisor")
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
        resume = {"type": "session.resume", "session_id": created["session"]["id"]}
        resume |= {"resume_token": created["resume_token"], "last_received_server_event_seq": 1}
        resumed = await recv(await duplex(address, resume))
        assert resumed["type"] == "session.resumed", resumed
        refused = await duplex(address, {"type": "session.update", "session": {}})
        assert (await recv(refused))["error"]["code"] == "server_draining"
    finally:
        stop(serve)
