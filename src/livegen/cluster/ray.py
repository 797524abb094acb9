"""Ray, imported in this one place: every module of ``cluster/`` asks ``import_ray()``.

A plain install (no ``ray`` extra) never imports Ray: a server of one process
with its models in-process does not reach this module. A process that asks
for Ray where it is missing gets one ``ConfigError`` naming the extra, not an
``ImportError`` from wherever Ray was first needed. ``has_ray`` tells the
configuration's checks (``--world-workers``) whether it could, without
importing it. ``tests/test_layers.py`` holds that no module outside
``cluster/`` imports Ray.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from livegen.errors import ConfigError

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


__all__ = ["MISSING", "has_ray", "import_ray"]
