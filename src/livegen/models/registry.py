"""The registry of models a server can serve: names, kinds, availability, loading.

Entries name their loader by import path, so that listing models (``livegen
models``, ``GET /v1/models``) imports nothing heavy, and a model whose extra is
not installed shows as unavailable instead of breaking the server. Loading
happens once per process; sessions share the loaded model and keep their state
in it per session (see ``models/voice.py`` and ``models/world.py``).

The registry offers only real models. Test doubles live in ``tests/``.
"""

from __future__ import annotations

import fnmatch
import importlib
import importlib.util
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from livegen.errors import ConfigError


class Kind(StrEnum):
    VOICE = "voice"
    WORLD = "world"


@dataclass(frozen=True)
class ModelInfo:
    name: str
    kind: Kind
    #: ``"package.module:function"``; it returns the model, and takes no argument but the
    #: server's model options (``ServerConfig.world_options``) for models that have any.
    loader: str
    description: str
    #: Modules that must be importable (an extra's packages) for the model to load.
    requires: tuple[str, ...] = ()
    #: Default-model preference: lower wins among available models of a kind.
    priority: int = 100
    aliases: tuple[str, ...] = field(default=())
    #: Whether "auto" may pick it; False for a model that needs options to load or is only a test
    #: of its path, so an install without the default's extra never falls back to it.
    auto: bool = True
    #: A lockstep (native full-duplex) voice model: in a cluster (``--workers``) it is loaded once,
    #: in the cluster's lockstep service (``cluster/lockstep.py``), not per process.
    lockstep: bool = False

    def is_available(self) -> bool:
        return all(importlib.util.find_spec(module) is not None for module in self.requires)

    def missing(self) -> list[str]:
        return [module for module in self.requires if importlib.util.find_spec(module) is None]


class Registry:
    """Model entries by name; loads each model at most once."""

    def __init__(self, entries: Iterable[ModelInfo] = ()) -> None:
        self._entries: dict[str, ModelInfo] = {}
        self._loaded: dict[str, Any] = {}
        for entry in entries:
            self.add(entry)

    def add(self, entry: ModelInfo) -> None:
        for name in (entry.name, *entry.aliases):
            if name in self._entries:
                raise ConfigError(f"model name {name!r} is registered twice")
            self._entries[name] = entry

    def entries(self, kind: Kind | None = None) -> list[ModelInfo]:
        unique = {id(e): e for e in self._entries.values()}.values()
        return sorted((e for e in unique if kind is None or e.kind == kind), key=lambda e: e.name)

    def get(self, name: str) -> ModelInfo:
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(e.name for e in self.entries()) or "none"
            raise ConfigError(f"unknown model {name!r}; registered models: {known}") from None

    def default(self, kind: Kind) -> ModelInfo | None:
        """The available model of this kind with the lowest priority, if any."""
        available = [e for e in self.entries(kind) if e.auto and e.is_available()]
        return min(available, key=lambda e: (e.priority, e.name), default=None)

    def resolve(self, kind: Kind, name: str | None) -> ModelInfo | None:
        """The entry for a ``--voice-model``/``--world-model`` value; 'auto' or None picks the default."""
        if name in (None, "auto"):
            return self.default(kind)
        if name == "none":
            return None
        entry = self.get(name)
        if entry.kind != kind:
            raise ConfigError(f"model {name!r} is a {entry.kind} model, not a {kind} model")
        if not entry.is_available():
            raise ConfigError(
                f"model {name!r} needs {', '.join(entry.missing())}; install livegen[{entry.kind}]"
            )
        return entry

    def load(
        self, name: str, options: Mapping[str, Any] | None = None, settings: Any = None, speech: Any = None
    ) -> Any:
        """The loaded model; ``options`` (e.g. a weights path) go to its loader as keywords,
        ``settings`` (one typed value, e.g. the cascade's) to a loader that takes ``settings``, and
        ``speech`` (a cluster's ``voice.SharedSpeech``) to a loader that takes ``speech``."""
        entry = self.get(name)
        if entry.name not in self._loaded:
            loader = _import_loader(entry.loader)
            taken = inspect.signature(loader).parameters
            if unknown := sorted(set(options or {}) - set(taken)):
                raise ConfigError(f"model {entry.name!r} takes no {', '.join(unknown)} option")
            given = {"settings": settings, "speech": speech}
            extra = {key: value for key, value in given.items() if value is not None and key in taken}
            self._loaded[entry.name] = loader(**(options or {}), **extra)
        return self._loaded[entry.name]

    def is_loaded(self, name: str) -> bool:
        return self.get(name).name in self._loaded


#: The model names OpenAI's realtime clients send (``gpt-realtime``, ``gpt-realtime-2.1``,
#: ``gpt-realtime-mini``, ``gpt-realtime-2025-08-28``, ``gpt-4o-realtime-preview-2024-12-17``,
#: ``gpt-4o-mini-realtime-preview``, ...): whole families, so a client's new default works too.
OPENAI_REALTIME_PATTERNS: tuple[str, ...] = ("gpt-realtime", "gpt-realtime-*", "gpt-4o*-realtime*")


@dataclass(frozen=True)
class ServedNames:
    """Which model a requested name means, and the name a session reports for it.

    The served voice model answers to its registered names, to ``served`` (like vLLM's
    ``--served-model-name``; the first is the name sessions report) and to any name matching
    ``patterns`` (shell-style, OpenAI's realtime families by default), so clients that carry
    the vendor's model names as defaults work unchanged. Other registered voice models keep
    their own names. A pure lookup: no model is loaded here.
    """

    registry: Registry
    #: The registered name of the served (default) voice model.
    default: str
    served: tuple[str, ...] = ()
    patterns: tuple[str, ...] = OPENAI_REALTIME_PATTERNS

    def resolve(self, requested: str) -> str:
        """The registered name of the model ``requested`` means; ``ConfigError`` if none."""
        if requested in self.served:
            return self.default
        try:
            return self.registry.get(requested).name
        except ConfigError:
            if any(fnmatch.fnmatchcase(requested, pattern) for pattern in self.patterns):
                return self.default
            raise

    def display(self, name: str) -> str:
        """The name a session reports for the registered model ``name``."""
        return self.served[0] if self.served and name == self.default else name

    def canonical(self, requested: str) -> str:
        """The reported name of the model ``requested`` means; an unknown name passes unchanged."""
        try:
            return self.display(self.resolve(requested))
        except ConfigError:
            return requested


def _import_loader(path: str) -> Callable[[], Any]:
    module_name, _, attribute = path.partition(":")
    loader: Callable[[], Any] = getattr(importlib.import_module(module_name), attribute)
    return loader
