"""Prometheus metrics of one server: sessions open, events in and out, errors by code, budgets.

Each app gets its own ``CollectorRegistry`` so that several servers in one
process (tests, benchmarks) never share counters.
"""

from __future__ import annotations

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
        for kind in ("voice", "world"):
            self.sessions_open.labels(kind=kind).set(0)
        self.budget = Gauge(
            "livegen_budget",
            "Configured limits (server/budgets.py): bytes, seconds or counts, by name",
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

    def render(self) -> bytes:
        return generate_latest(self.registry)
