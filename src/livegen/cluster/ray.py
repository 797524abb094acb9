"""Ray, imported in this one place: every module of ``cluster/`` asks ``import_ray()``.

A plain install (no ``ray`` extra) never imports Ray: a server of one process
with its models in-process does not reach this module. A process that asks
for Ray where it is missing gets one ``ConfigError`` naming the extra, not an
``ImportError`` from wherever Ray was first needed. ``has_ray`` tells the
configuration's checks (``--world-workers``) whether it could, without
importing it. What every model service's actor says of itself is here too:
``was_restarted`` and ``service_head``, the head of each ``report``.
``tests/test_layers.py`` holds that no module outside
``cluster/`` imports Ray.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import warnings
from types import ModuleType
from typing import Any

from livegen.errors import ConfigError
from livegen.models.voice import ModelHealth

#: What a process without the extra is told to install.
MISSING = "scale-out (--workers, --ray-address, --world-workers) needs Ray: pip install 'livegen[ray]'"


def has_ray() -> bool:
    """Whether Ray is installed here (it is not imported)."""
    return importlib.util.find_spec("ray") is not None


def import_ray() -> ModuleType:
    """The ``ray`` module; a ``ConfigError`` where it is not installed."""
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise ConfigError(MISSING) from None


def was_restarted() -> bool:
    """Whether this actor is one Ray restarted (its process died); False for a service's body made
    outside an actor (a test's)."""
    ray = import_ray()
    if not ray.is_initialized():
        return False
    with warnings.catch_warnings():  # Ray's own use of a deprecated name inside it
        warnings.simplefilter("ignore")
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)


def service_head(name: str, started_at: float, restarted: bool, health: ModelHealth) -> dict[str, Any]:
    """The head of a model service's ``report`` (``/health``'s ``cluster`` block): where its actor
    runs, whether Ray restarted it, and how its model is."""
    ray = import_ray()
    return {
        "name": name,
        "pid": os.getpid(),
        "node": ray.util.get_node_ip_address(),
        "actor_id": ray.get_runtime_context().get_actor_id(),
        "restarted": restarted,
        "started_at": started_at,
        "ready": health.ready,
        "reason": health.reason,
    }


__all__ = ["MISSING", "has_ray", "import_ray", "service_head", "was_restarted"]
