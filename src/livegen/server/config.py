"""The server's configuration: one frozen value built by the CLI or by tests."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    #: Required as a bearer token on every route but /health when set.
    api_key: str | None = field(default_factory=lambda: os.environ.get("LIVEGEN_API_KEY") or None)
    #: A registered voice model name, "auto" (the best available) or "none".
    voice_model: str = "auto"
    #: A registered world model name, "auto" (the best available) or "none".
    world_model: str = "auto"
    #: Names the voice model answers to (like vLLM's ``--served-model-name``); the first is the
    #: ``model`` its sessions report. Empty: its registered name.
    served_model_names: tuple[str, ...] = ()
    #: Shell-style patterns of more names for the voice model, beside OpenAI's realtime families.
    model_aliases: tuple[str, ...] = ()
    log_level: str = "info"
    #: Most sessions of each kind served at once; more are refused with a clear error.
    max_sessions: int = 64
    #: Seconds a voice session outlives a lost socket, waiting for ``session.resume`` (0: none).
    resume_grace_s: float = 30.0
    #: OpenAI-compatible chat endpoint for the voice model's replies (optional).
    llm_base_url: str | None = None
    llm_model: str | None = None
    #: World workers: 0 steps the world model in this process; N > 0 starts N Ray actors.
    world_workers: int = 0
    #: Ray cluster to join for world workers (e.g. "auto" or "ray://head:10001"); None starts a local Ray.
    ray_address: str | None = None
    #: Speech-synthesis worker processes of the cascade voice model; None: LIVEGEN_TTS_WORKERS, else
    #: the cores (2 to 8). The model is loaded once per process, so the first server's value holds.
    tts_workers: int | None = None
