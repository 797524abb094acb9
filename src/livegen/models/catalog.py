"""The models livegen ships, one entry each; the default registry is built from this list.

Add a model by adding an entry here and a loader in its own module. Nothing in
this file imports a model's dependencies.
"""

from __future__ import annotations

from livegen.models.registry import Kind, ModelInfo, Registry

CATALOG: list[ModelInfo] = [
    ModelInfo(
        name="procedural-world",
        kind=Kind.WORLD,
        loader="livegen.models.procedural:load",
        description="deterministic top-down room game, rendered directly (action track, theme prompt)",
        priority=50,
    ),
]


def default_registry() -> Registry:
    return Registry(CATALOG)


__all__ = ["CATALOG", "Kind", "default_registry"]
