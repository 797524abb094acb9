"""The one switch between in-process models and the cluster's: ``LIVEGEN_CLUSTER``, read here only.

A server process of a cluster (``livegen serve --workers N`` or
``--ray-address``) is told so by its supervisor (``supervisor.py``), which sets
``LIVEGEN_CLUSTER`` in each child to the JSON of its ``Membership``: its tag,
the cluster's namespace and its coordinator's name. A process where it is
unset is a server of its own and loads every model itself. ``services.py``
reads it once, when the app is made, for all three model services (the
cascade's heavy parts, ``speech.py``; a lockstep model's frame clock,
``lockstep.py``; the world model's hosts, ``world.py``), so they are all in the
cluster or all in-process.

It replaces two variables the supervisor used to set, ``LIVEGEN_SPEECH_SERVICE``
and ``LIVEGEN_WORLD_CLUSTER``. They are not read any more: only the supervisor
ever set them, in its own children, from the assignment it hands each one (a
user's value was overwritten), and a process that joins a cluster must also
join its Ray, which only the supervisor's child does.
"""

from __future__ import annotations

import json
import os
from collections.abc import MutableMapping
from dataclasses import asdict, dataclass

#: Set by the supervisor in each server process of a cluster: JSON of its ``Membership``.
CLUSTER_ENV = "LIVEGEN_CLUSTER"


@dataclass(frozen=True)
class Membership:
    """This server process in its cluster: its tag, and where the live processes are listed."""

    tag: str
    namespace: str
    #: The coordinator actor's name (``coordinator.py``): its ``report`` lists live tags.
    coordinator: str


def membership() -> Membership | None:
    """The cluster this process serves in; None: a server of its own, its models in-process."""
    value = os.environ.get(CLUSTER_ENV)
    return Membership(**json.loads(value)) if value else None


def join(member: Membership, environ: MutableMapping[str, str] = os.environ) -> None:
    """Mark this process (``environ``: its environment) a server of ``member``'s cluster."""
    environ[CLUSTER_ENV] = json.dumps(asdict(member))


__all__ = ["CLUSTER_ENV", "Membership", "join", "membership"]
