"""The ASGI server: routes, auth, metrics, and the transports of each kind of session.

``server/`` knows nothing of models beyond the registry: each service builds
its kind's engine (``runtime/voice/``, ``runtime/world/``), which asks the
registry for the model by name; the service's routes only carry events between
the client and the engine.
"""

from livegen.server.app import create_app
from livegen.server.config import ServerConfig

__all__ = ["ServerConfig", "create_app"]
