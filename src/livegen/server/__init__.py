"""The ASGI server: routes, auth, metrics, and the WebSocket endpoints of each service.

``server/`` knows nothing of models beyond the registry: each service asks the
registry for its model by name and hands it to its runtime.
"""

from livegen.server.app import create_app
from livegen.server.config import ServerConfig

__all__ = ["ServerConfig", "create_app"]
