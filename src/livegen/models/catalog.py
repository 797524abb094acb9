"""The models livegen ships, one entry each; the default registry is built from this list.

Add a model by adding an entry here and a loader in its own module. Nothing in
this file imports a model's dependencies.
"""

from __future__ import annotations

from livegen.models.registry import Kind, ModelInfo, Registry

CATALOG: list[ModelInfo] = [
    ModelInfo(
        name="tiny-world",
        kind=Kind.WORLD,
        loader="livegen.models.tinyworld.model:load",
        description="Embedded AR-diffusion world model of the room game (0.7 M params, CPU)",
        requires=("torch",),
        priority=10,
    ),
]


def default_registry() -> Registry:
    return Registry(CATALOG)


__all__ = ["CATALOG", "Kind", "default_registry"]
