"""Prometheus metrics of one server: sessions open, events in and out, errors by code, budgets.

Each app gets its own ``CollectorRegistry`` so that several servers in one
process (tests, benchmarks) never share counters. In a cluster every process
has its own (a scrape of the public port reaches whichever process the kernel
picks: scrape each at its private address, docs/cluster.md), and
``livegen_process_info`` names the process that answered.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.sessions_open = Gauge(
            "livegen_sessions_open", "Sessions open now, by kind", ["kind"], registry=self.registry
        )
        self.sessions_total = Counter(
            "livegen_sessions", "Sessions opened, by kind", ["kind"], registry=self.registry
        )
        self.events = Counter(
            "livegen_events",
            "Wire events, by kind of session and direction (in: from clients, out: to clients)",
            ["kind", "direction"],
            registry=self.registry,
        )
        self.errors = Counter(
            "livegen_errors",
            "Error events sent to clients, by kind and code",
            ["kind", "code"],
            registry=self.registry,
        )
        self.sessions_parked = Gauge(
            "livegen_sessions_parked",
            "Sessions without a socket waiting for a resume, by kind (not counted in sessions_open's limit)",
            ["kind"],
            registry=self.registry,
        )
        self.parked_bytes = Gauge(
            "livegen_parked_bytes",
            "Bytes of journal and history that parked sessions hold, by kind",
            ["kind"],
            registry=self.registry,
        )
        self.sessions_parked.labels(kind="voice").set(0)
        self.parked_bytes.labels(kind="voice").set(0)
        for kind in ("voice", "world"):
            self.sessions_open.labels(kind=kind).set(0)
        self.budget = Gauge(
            "livegen_budget",
            "Configured limits (server/http/budgets.py): bytes, seconds or counts, by name",
            ["name"],
            registry=self.registry,
        )
        self.connections_open = Gauge(
            "livegen_connections_open", "WebSocket connections open now, all routes", registry=self.registry
        )
        self.refused = Counter(
            "livegen_refused",
            "Requests refused or connections closed by a guard (origin, host, budgets), by code",
            ["code"],
            registry=self.registry,
        )
        #: Each open connection's count of bytes queued for its socket and not yet written.
        self.unsent_sources: set[Callable[[], int]] = set()
        unsent = Gauge(
            "livegen_unsent_bytes",
            "Bytes queued for WebSocket clients and not yet written, all connections",
            registry=self.registry,
        )
        unsent.set_function(lambda: sum(source() for source in list(self.unsent_sources)))
        self.process_info = _process_info(self.registry)  # tag and group: ``identify``

    def identify(self, tag: str, group: str) -> None:
        """This process's ``livegen_process_info`` (a cluster's process: its tag and group)."""
        self.process_info.clear()
        self.process_info.labels(pid=str(os.getpid()), tag=tag, group=group).set(1)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _process_info(registry: CollectorRegistry) -> Gauge:
    """``livegen_process_info`` of a process of no cluster (``Metrics.identify`` names one's)."""
    gauge = Gauge(
        "livegen_process_info",
        "The server process that answered: its pid, and in a cluster its tag and group (1)",
        ["pid", "tag", "group"],
        registry=registry,
    )
    gauge.labels(pid=str(os.getpid()), tag="", group="").set(1)
    return gauge
