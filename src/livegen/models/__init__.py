"""Model contracts, the registry, and the embedded default models.

``models/`` knows nothing of WebSockets or sessions: ``voice.py`` and
``world.py`` state what the runtime needs of a model, ``registry.py`` how models
are found and loaded, ``catalog.py`` which models ship. Each served model is a
subpackage: ``room/`` (the room game and ``procedural-world``), ``tinyworld/``
(``tiny-world`` and its shipped weights; its training is ``livegen.training``),
``cascade/`` (the voice cascade) and ``causalwan/``.
"""

from livegen.models.catalog import CATALOG, default_registry
from livegen.models.registry import Kind, ModelInfo, Registry

__all__ = ["CATALOG", "Kind", "ModelInfo", "Registry", "default_registry"]
