"""The seam between the app and each kind of session: a ``Service``.

A service owns one family of routes (``/v1/realtime``, ``/v1/worlds``), the
runtime behind them and its readiness. ``app.py`` only starts services, asks
them whether they are ready, and mounts their routes; it never learns what a
session is.
"""

from __future__ import annotations

from typing import Any, Protocol

from starlette.routing import BaseRoute


class Service(Protocol):
    name: str

    def routes(self) -> list[BaseRoute]: ...

    async def start(self) -> None:
        """Load models and start background work; called once, after the server is up."""
        ...

    async def stop(self) -> None:
        """Close every session (each gets its terminal event) and release resources."""
        ...

    def health(self) -> dict[str, Any]:
        """Readiness: a dict with at least ``ready: bool``."""
        ...
