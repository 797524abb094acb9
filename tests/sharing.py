"""What the suite shares between tests: loaded models and running servers, one per configuration.

Starting a server with the default models loaded the cascade (Whisper, the
speech worker, the voice detector) afresh each time: 4-5 s a server on two
shared cores, for a model that a server shares with every session by design
and keeps loaded after it stops (``runtime/voice/models.py``). ``Registries``
gives every server of the run with the same model configuration the same
registry, so each configuration loads once. ``Servers`` goes one step further
for tests that only read a server: one running server per configuration, for
the whole run.

A key holds everything a model's load or its per-server wiring reads: the
model fields of ``ServerConfig`` and the ``LIVEGEN_*`` environment (the
cascade's settings fall back to it), so a test that changes either gets models
of its own. One exception: the chat endpoint a server points the cascade at
(``--llm-base-url`` and the rest of ``LLM_WIRING``), a new port in nearly every
test, is left out where the cascade otherwise answers with the built-in
responder; the server sets it on the loaded model as it starts, and
``Registries.release`` sets the built-in responder back once it stops (as the
conformance suite's ``llm_server`` does). Two such servers must not run at once
on one registry: a test that runs two gives one a registry of its own.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from livegen.models import Registry, default_registry
from livegen.models.cascade.settings import CascadeSettings
from livegen.models.voice import RemoteLLM
from livegen.server import ServerConfig
from livegen.server.thread import ServerThread

#: ``ServerConfig`` fields that reach a model's loader or its configuration in a server
#: (``runtime/voice/models.py``, ``runtime/world/engine.py``): weights, cascade settings,
#: the language model, the remote speech stages, the served names and a cluster's workers.
MODEL_FIELD_PREFIXES = (
    *("voice_", "world_", "llm", "asr_", "tts_", "vad", "duplex_", "speech_"),
    *("served_", "model_", "workers", "ray_"),
)


#: The language model's fields that a server sets on its loaded cascade (``use_llm``), not its loader.
LLM_WIRING = frozenset(
    field.name for field in dataclasses.fields(ServerConfig) if field.name.startswith("llm_")
) - {field.name for field in dataclasses.fields(CascadeSettings)}


def answers_builtin(config: ServerConfig) -> bool:
    """Whether the cascade's own language model is the built-in responder (the suite's default)."""
    return (config.llm or os.environ.get("LIVEGEN_LLM")) == "builtin"


def model_key(config: ServerConfig) -> str:
    """What a server's models depend on, as one comparable string."""
    wiring = LLM_WIRING if answers_builtin(config) else frozenset()
    fields = {
        field.name: getattr(config, field.name)
        for field in dataclasses.fields(config)
        if field.name.startswith(MODEL_FIELD_PREFIXES) and field.name not in wiring
    }
    environ = {name: value for name, value in os.environ.items() if name.startswith("LIVEGEN_")}
    return repr((sorted(fields.items()), sorted(environ.items())))


class Registries:
    """The default registry for each model configuration, made on first use."""

    def __init__(self) -> None:
        self._made: dict[str, Registry] = {}

    def for_config(self, config: ServerConfig) -> Registry:
        key = model_key(config)
        if key not in self._made:
            self._made[key] = default_registry()
        return self._made[key]

    def release(self, config: ServerConfig) -> None:
        """After a server of ``config`` stopped: its chat endpoint off the shared models."""
        if config.llm_base_url is None or not answers_builtin(config):
            return  # nothing was set, or its models are its configuration's alone
        registry = self.for_config(config)
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
        owner = "default" if factory is None else f"{factory.__module__}:{factory.__qualname__}"
        key = repr((owner, sorted(fields.items()), model_key(ServerConfig(**fields))))
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
