"""The ASGI server: routes, auth, metrics, and the transports of each kind of session.

``server/`` knows nothing of models beyond the registry: each service builds
its kind's engine (``runtime/voice/``, ``runtime/world/``), which asks the
registry for the model by name; the service's routes only carry events between
the client and the engine.

Its names are imported on first use, so that ``livegen serve --help`` can read
option defaults from ``server/config.py`` without loading the app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from livegen.server.app import create_app
    from livegen.server.config import ServerConfig

__all__ = ["ServerConfig", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from livegen.server.app import create_app

        return create_app
    if name == "ServerConfig":
        from livegen.server.config import ServerConfig

        return ServerConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
