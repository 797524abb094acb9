"""What guards a cluster's ports: ``livegen serve --workers 2 --host 127.0.0.1`` with a Ray of its
own and an API key, attacked from outside (issue 37: items 3 and 4).

- every socket the server's process tree listens on (its own two per process, and every one of
  Ray's: GCS, raylet, agents, workers) is on loopback, and Ray's token file is private;
- the private port's relayed mark is no key: a forged one is a new session like any other,
  counted against ``--max-sessions``, while the cluster's own relay (resumes through the other
  process) still works;
- ``/health`` without the key names no private address.

Real processes, as in ``test_cluster.py`` (``cluster_harness.py``), but a Ray the server starts
itself (``--workers`` without ``--ray-address``), so that its listening addresses are the server's.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cluster_harness as harness
import httpx
import pytest
import websockets
from cluster_harness import MAX_SESSIONS, OPENED, Cluster, free_port, recv, start_serve, stop, until, wait_for

psutil = pytest.importorskip("psutil")
pytest.importorskip("ray")

pytestmark = pytest.mark.cluster  # starts Ray: out of the fast tier

close_clients = pytest.fixture(autouse=True)(harness.close_clients)

KEY = "guards-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The server's home: where Ray writes its token (``~/.ray/auth_token``), fresh for the test."""
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def guarded(home: Path) -> Iterator[Cluster]:
    port = free_port()
    serve = start_serve(
        {"HOME": str(home)},
        workers=2,
        host="127.0.0.1",
        port=port,
        api_key=KEY,
        max_sessions=MAX_SESSIONS,
        drain_timeout_s=1.0,
    )
    try:
        body = wait_for(port, lambda b: len(b["cluster"]["processes"]) == 2)
        yield Cluster(port, body["cluster"]["group"], serve)
    finally:
        stop(serve)


def processes(cluster: Cluster) -> list[dict[str, Any]]:
    """The cluster's processes as an authenticated ``/health`` names them (their private addresses)."""
    body = httpx.get(f"http://127.0.0.1:{cluster.port}/health", headers=AUTH, timeout=10).json()
    return [p for p in body["cluster"]["processes"] if p["group"] == cluster.group]


def is_loopback(host: str) -> bool:
    address = ipaddress.ip_address(host)
    mapped = getattr(address, "ipv4_mapped", None)  # a v6 socket bound to ::ffff:127.0.0.1
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def listening(pid: int) -> list[tuple[str, str, int]]:
    """Every listening TCP socket of ``pid`` and its descendants: (process name, address, port)."""
    root = psutil.Process(pid)
    found = []
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            for conn in process.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append((process.name(), conn.laddr.ip, conn.laddr.port))
    return found


def test_every_socket_of_the_server_tree_listens_on_loopback_and_rays_token_is_private(
    guarded: Cluster, home: Path
) -> None:
    sockets = listening(guarded.serve.pid)
    names = {name for name, _, _ in sockets}
    # Not vacuous: the servers' ports and Ray's own (GCS, raylet, its agents, workers) are there.
    assert len(sockets) >= 10 and {"gcs_server", "raylet"} <= names, sockets
    exposed = [s for s in sockets if not is_loopback(s[1])]
    assert exposed == [], f"{len(exposed)} of {len(sockets)} listening sockets on other interfaces: {exposed}"
    token = home / ".ray" / "auth_token"
    assert token.exists() and stat.S_IMODE(token.stat().st_mode) == 0o600


async def open_forged(address: str) -> str:
    """A new session opened on a private port with a forged relayed mark: its first event's type,
    or the error code it was refused with."""
    ws = await websockets.connect(
        f"{address}/v1/realtime?model=scripted-voice", additional_headers={**AUTH, "x-livegen-relayed": "1"}
    )
    OPENED.append(ws)
    first = await recv(ws)
    return str(first["type"] if first["type"] != "error" else first["error"]["code"])


async def test_a_forged_relayed_mark_is_a_new_session_counted_against_max_sessions(guarded: Cluster) -> None:
    """Before: any socket on a private port that carried the mark counted as a resume (never
    refused for room), so 6 sessions opened against a cap of 3."""
    one, other = processes(guarded)
    outcomes = [await open_forged(p["address"]) for p in (one, other) for _ in range(MAX_SESSIONS)]
    assert outcomes.count("session.created") == MAX_SESSIONS, outcomes
    assert set(outcomes) == {"session.created", "too_many_sessions"}
    while OPENED:  # the room back for the test that follows
        await OPENED.pop().close()


async def test_a_resume_through_the_other_process_still_carries_the_clusters_mark(guarded: Cluster) -> None:
    """The cluster's own relay is marked with its shared secret: a resume of a session of one
    process, sent to the other's port, reaches the session and replays it."""
    one, other = processes(guarded)
    ws = await websockets.connect(
        f"{one['address']}/v1/realtime?model=scripted-voice", additional_headers=AUTH
    )
    OPENED.append(ws)
    seen: list[dict[str, Any]] = []
    created = await until(ws, "session.created", seen)
    await ws.send(json.dumps({"type": "response.create"}))
    await until(ws, "response.output_audio.delta", seen)
    await harness.drop(ws)
    session_id, token = created["session"]["id"], created["resume_token"]
    resumed = await websockets.connect(
        f"{other['address']}/v1/realtime?session_id={session_id}", additional_headers=AUTH
    )
    OPENED.append(resumed)
    message = {"type": "session.resume", "session_id": session_id, "resume_token": token}
    await resumed.send(json.dumps({**message, "last_event_seq": len(seen)}))
    assert (await recv(resumed))["type"] == "session.resumed"


def test_health_without_the_key_names_no_private_address(guarded: Cluster) -> None:
    anonymous = httpx.get(f"http://127.0.0.1:{guarded.port}/health", timeout=10).json()["cluster"]
    assert anonymous["processes"] and all("address" not in p for p in anonymous["processes"])
    assert all("address" not in node for node in anonymous["nodes"])
    authenticated = processes(guarded)
    assert all(p["address"].startswith("ws://127.0.0.1:") for p in authenticated)


def test_each_process_is_scraped_at_its_private_address_and_names_itself(guarded: Cluster) -> None:
    """``/metrics`` is per process; a scrape of the public port reaches whichever the kernel picks,
    so each process is scraped at its private address and says which it is."""
    for process in processes(guarded):
        answer = httpx.get(
            f"{process['address'].replace('ws://', 'http://')}/metrics", headers=AUTH, timeout=10
        )
        assert answer.status_code == 200
        labels = f'group="{guarded.group}",pid="{process["pid"]}",tag="{process["tag"]}"'
        assert f"livegen_process_info{{{labels}}} 1.0" in answer.text, answer.text[-600:]
