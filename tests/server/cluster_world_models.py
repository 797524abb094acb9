"""The world model of the cluster's world tests (``test_cluster_world.py``): the procedural room
game declaring KV pages so large that the default KV budget admits two sessions, whichever server
processes open them. Its pages are bookkeeping only (it keeps its own state): cheap on a CPU.

The server processes, and the cluster's world service that loads the model, import it by path
(``cluster_world_models:load``, with ``tests/server`` on ``PYTHONPATH``).
"""

from __future__ import annotations

import dataclasses
import json
import sys

from livegen.cluster.supervisor import run
from livegen.models import Kind, ModelInfo, Registry
from livegen.models.room.procedural import ProceduralWorld
from livegen.models.world import KVGeometry
from livegen.server.config import ServerConfig

NAME = "paged-world"
#: 7 pages a session (1 sink, 2 window, 4 a chunk) of 8 * HEAD_DIM bytes: 200 MiB, two in 512 MiB.
HEAD_DIM = 3_744_914
GEOMETRY = KVGeometry(
    num_layers=1, num_heads=1, head_dim=HEAD_DIM, tokens_per_frame=1, window_frames=2, sink_frames=1
)


class PagedWorld(ProceduralWorld):
    name = NAME
    spec = dataclasses.replace(ProceduralWorld.spec, kv=GEOMETRY)


def load() -> PagedWorld:
    return PagedWorld()


def registry() -> Registry:
    return Registry([ModelInfo(NAME, Kind.WORLD, "cluster_world_models:load", "procedural, paged")])


if __name__ == "__main__":  # python cluster_world_models.py '{"workers": 2, ...}': a server of it
    run(ServerConfig(**json.loads(sys.argv[1])), "cluster_world_models:registry")
