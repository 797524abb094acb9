"""``cluster/services.py`` and ``cluster/mode.py``: the one switch, read once, and what it chooses.

The choice is made from a real ``ServerConfig`` and the real environment
variable (set by ``mode.join`` as the supervisor sets it in each child); the
services it hands out are checked by kind, without starting Ray (the cluster
suites in ``tests/server/test_cluster*.py`` run them for real).
"""

from __future__ import annotations

import pytest

from livegen.cluster import mode
from livegen.cluster.services import ClusterLockstep, ClusterSpeech, RayWorkers, SharedWorlds, choose
from livegen.server.config import ServerConfig

MEMBER = mode.Membership("t1", "livegen", "livegen-coordinator")


@pytest.fixture
def environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(mode.CLUSTER_ENV, raising=False)


def _join(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process a server of ``MEMBER``'s cluster, as the supervisor makes its children."""
    child: dict[str, str] = {}
    mode.join(MEMBER, child)
    monkeypatch.setenv(mode.CLUSTER_ENV, child[mode.CLUSTER_ENV])  # undone after the test


def test_join_writes_what_membership_reads(environ: None, monkeypatch: pytest.MonkeyPatch) -> None:
    assert mode.membership() is None
    _join(monkeypatch)
    assert mode.membership() == MEMBER


def test_a_server_of_its_own_runs_every_model_in_process(environ: None) -> None:
    services = choose(ServerConfig())
    assert services.voice.lockstep is None and services.voice.speech is None
    assert services.world() is None


@pytest.mark.cluster  # it reads --world-workers' configuration (tests/test_markers.py's sign), starts no Ray
def test_world_workers_alone_are_ray_actors_of_this_process(environ: None) -> None:
    workers = choose(ServerConfig(world_workers=2, ray_address="ray://x:1")).world()
    assert isinstance(workers, RayWorkers)
    assert (workers.address, workers.count) == ("ray://x:1", 2)


@pytest.mark.parametrize(("world_workers", "count"), [(0, 1), (3, 3)])
def test_a_server_process_of_a_cluster_uses_the_clusters_services(
    environ: None, monkeypatch: pytest.MonkeyPatch, world_workers: int, count: int
) -> None:
    _join(monkeypatch)
    services = choose(ServerConfig(world_workers=world_workers))
    assert isinstance(services.voice.lockstep, ClusterLockstep)
    assert isinstance(services.voice.speech, ClusterSpeech)
    world = services.world()
    assert isinstance(world, SharedWorlds)
    assert (world.member, world.count) == (MEMBER, count)
    assert services.world() is not world  # each engine its own source


def test_the_old_switches_choose_nothing(environ: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the supervisor set them, in its own children: they are not read any more."""
    monkeypatch.setenv("LIVEGEN_SPEECH_SERVICE", "ray")
    monkeypatch.setenv("LIVEGEN_WORLD_CLUSTER", '{"tag": "t", "namespace": "n", "coordinator": "c"}')
    services = choose(ServerConfig())
    assert services.voice.speech is None and services.world() is None


@pytest.mark.parametrize(
    ("path", "owner"),
    [
        ("/v1/realtime/calls/rtc_ab12cd/hangup", "rtc_ab12cd"),
        ("/v1/worlds/calls/rtc_ab12cd/hangup", "rtc_ab12cd"),
        ("/v1/live/sessions/sess_ab12cd/hangup", "sess_ab12cd"),
        ("/v1/live/sessions/sess_ab12cd", None),
        ("/v1/models", None),
    ],
)
def test_a_hangup_goes_to_the_process_that_holds_its_call_or_session(path: str, owner: str | None) -> None:
    from livegen.cluster.gate import _owned_request

    assert _owned_request({"path": path, "method": "POST", "query_string": b""}) == owner
