"""What the suite shares between tests: loaded models and running servers.

Starting a server with the default models loaded the cascade (Whisper, the
speech worker, the voice detector) afresh each time: 4-9 s a server on two
shared cores, for a model that a server shares with every session by design
and keeps loaded after it stops (``runtime/voice/models.py``). ``Registries``
gives every server of the run the catalog's models from one cache, keyed by
what a model's loader is given (its options, the cascade's settings) and the
``LIVEGEN_*`` environment that settings fall back to, so each voice model loads
once per configuration of its own, whatever else the servers' configurations
say (a world model, stepped by its server's own thread, still loads per server).
``Servers`` goes one step further for tests that only read a server: one
running server per configuration, for the whole run.

The chat endpoint a server points the cascade at (``--llm-base-url``: a new
port in nearly every test) is not part of a load; the server sets it on the
loaded model as it starts (``use_llm``), and ``Registries.release`` sets the
built-in responder, the suite's default, back once it stops (as the
conformance suite's ``llm_server`` does). So two such servers must not run at
once: a test that runs two gives one a registry of its own. A server that
points another language model (``--llm``) at an endpoint gets models of its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from livegen.models import Kind, ModelInfo, Registry, default_registry
from livegen.models.catalog import CATALOG
from livegen.models.voice import RemoteLLM
from livegen.server import ServerConfig
from livegen.server.thread import ServerThread


def answers_builtin(config: ServerConfig) -> bool:
    """Whether the cascade's own language model is the built-in responder (the suite's default)."""
    return (config.llm or os.environ.get("LIVEGEN_LLM")) == "builtin"


def is_shared(entry: ModelInfo) -> bool:
    """Whether servers may share a loaded ``entry``: a voice model serves any number of sessions
    from any thread; a world model or a lockstep one is stepped by its server's own worker
    thread or frame clock, so two servers on one would step it at once."""
    return entry.kind is Kind.VOICE and not entry.lockstep


class SharedRegistry(Registry):
    """The catalog, its voice models loaded from the run's cache: a load with the same inputs as
    an earlier one, in any server, is that model."""

    def __init__(self, cache: dict[str, Any]) -> None:
        super().__init__(CATALOG)
        self._cache = cache
        self._mine: dict[str, Any] = {}

    def load(
        self, name: str, options: Mapping[str, Any] | None = None, settings: Any = None, speech: Any = None
    ) -> Any:
        entry = self.get(name)
        if not is_shared(entry) or speech is not None:  # a cluster's speech service: this server's own
            return super().load(name, options, settings, speech)
        if entry.name not in self._mine:
            environ = sorted((k, v) for k, v in os.environ.items() if k.startswith("LIVEGEN_"))
            key = repr((entry.name, sorted((options or {}).items()), settings, environ))
            if key not in self._cache:
                self._cache[key] = Registry([entry]).load(entry.name, options, settings)
            self._mine[entry.name] = self._cache[key]
        return self._mine[entry.name]

    def is_loaded(self, name: str) -> bool:
        return self.get(name).name in self._mine or super().is_loaded(name)


class Registries:
    """A registry for each server of the run, its models from one cache."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    def for_config(self, config: ServerConfig) -> Registry:
        if config.llm_base_url is not None and not answers_builtin(config):
            return default_registry()  # release could not set its language model back
        return SharedRegistry(self._cache)

    @staticmethod
    def release(config: ServerConfig, registry: Registry) -> None:
        """After a server of ``config`` stopped: its chat endpoint off the models it shares."""
        if config.llm_base_url is None or not isinstance(registry, SharedRegistry):
            return
        for entry in registry.entries():
            if registry.is_loaded(entry.name) and isinstance(model := registry.load(entry.name), RemoteLLM):
                model.use_llm(None, None)


class Servers:
    """Running servers by configuration, for tests that do not change a server's state.

    A test asks with its registry's factory (None: the default models) and the
    config fields; the same request gets the same ready server. All stop when
    the run ends.
    """

    def __init__(self, registries: Registries) -> None:
        self._registries = registries
        self._running: dict[str, ServerThread] = {}

    def get(self, factory: Callable[[], Registry] | None = None, **fields: Any) -> ServerThread:
        fields.setdefault("api_key", None)
        assert "llm_base_url" not in fields, "a shared server's language model would outlive its test"
        owner = "default" if factory is None else f"{factory.__module__}:{factory.__qualname__}"
        environ = sorted((k, v) for k, v in os.environ.items() if k.startswith("LIVEGEN_"))
        key = repr((owner, sorted(fields.items()), environ))
        if key not in self._running:
            config = ServerConfig(**fields)
            registry = self._registries.for_config(config) if factory is None else factory()
            server = ServerThread(config, registry).start()
            self._running[key] = server  # before the wait: a server that never gets ready still stops
            server.wait_ready(timeout=120)
        return self._running[key]

    def stop(self) -> None:
        for server in self._running.values():
            server.stop()
        self._running.clear()
