"""Models for the cluster tests' server processes: the scripted voice, the procedural world, and
the cascade (whose recogniser and speech workers the processes share: its speech service).

The processes are started by ``cluster/supervisor.py`` in their own interpreters, so their registry is
named by import path (``cluster_models:registry``, with ``tests/server`` on ``PYTHONPATH``).
"""

from __future__ import annotations

import json
import sys

from livegen.cluster.supervisor import run
from livegen.models import Kind, ModelInfo, Registry, default_registry
from livegen.server.config import ServerConfig
from voice.scripted import ScriptedVoice, load


def load_long() -> ScriptedVoice:
    """The scripted voice with answers long enough (1.5 s) to drop a socket in the middle of one."""
    model = load()
    model.script.reply_ms = 1500
    return model


def registry() -> Registry:
    shipped = [
        entry for entry in default_registry().entries() if entry.name in ("procedural-world", "cascade")
    ]
    voice = ModelInfo("scripted-voice", Kind.VOICE, "cluster_models:load_long", "a scripted test double")
    return Registry([voice, *shipped])


def ray_cluster() -> None:
    """Ray's own test cluster of two nodes, one CPU each, until stdin closes; its address on stdout.
    In a process of its own: Ray's threads stay out of the tests' process."""
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        nodes.add_node(num_cpus=1)
        print(nodes.address, flush=True)
        sys.stdin.read()
    finally:
        nodes.shutdown()


if __name__ == "__main__":  # python cluster_models.py '{"workers": 2, ...}': a server of these models
    if sys.argv[1] == "--ray-cluster":
        ray_cluster()
    else:
        run(ServerConfig(**json.loads(sys.argv[1])), "cluster_models:registry")
