"""The cluster lockstep tests' model: ``moshi-tiny`` with two slots, as a server's registry.

``livegen serve --workers`` starts its processes (and Ray its lockstep service) in interpreters of
their own, so the registry is named by import path (``cluster_lockstep_models:registry``, with
``tests/server`` on ``PYTHONPATH``). Two slots: a third session anywhere in the cluster is refused.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from livegen.cluster.supervisor import run
from livegen.models import Kind, ModelInfo, Registry
from livegen.server.config import ServerConfig

NAME = "moshi-two"


def load_two() -> Any:
    from livegen.models.moshi.loader import load_tiny

    return load_tiny(max_sessions=2)


def registry() -> Registry:
    entry = ModelInfo(
        NAME,
        Kind.VOICE,
        "cluster_lockstep_models:load_two",
        "moshi-tiny with two slots (a test's)",
        requires=("torch", "transformers"),
        lockstep=True,
    )
    return Registry([entry])


if __name__ == "__main__":  # python cluster_lockstep_models.py '{"workers": 2, ...}'
    run(ServerConfig(**json.loads(sys.argv[1])), "cluster_lockstep_models:registry")
