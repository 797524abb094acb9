"""The cascade voice model's options: one typed, frozen value that ``load`` takes.

``livegen serve`` fills it from its options (the ``ServerConfig`` fields of the same names, read
by ``runtime/voice/models.py``); a benchmark or a test that loads the model by itself passes one,
or none. A setting left None falls back to its environment variable (``LIVEGEN_`` and the name
in capitals, the way the model was configured before it took settings), then to the model's own
default: the ONNX Silero, recognition and speech sized to the cores (``model.AsrSizing``,
``tts.default_workers``). A bad value is a ``ConfigError`` that names its flag, or its variable.

Importing this module imports nothing heavy: ``livegen serve`` checks the settings before it
loads anything.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from livegen.errors import ConfigError

#: The Silero builds a session can run, the default first.
VAD_BACKENDS = ("onnx", "ggml")
#: The settings that count something (workers, threads, a batch): each at least 1.
COUNTS = (
    "asr_batch", "asr_workers", "asr_threads", "tts_workers", "tts_threads",
    "llm_threads", "llm_context", "llm_parallel",
)  # fmt: skip
#: The server's recogniser unless ``--asr-model`` says otherwise (``asr.DEFAULT``; here so that the
#: CLI's help and the catalog name it without importing the recogniser). Chosen from ``livegen bench
#: voice-model`` (docs/voice-models.md, "Speech recognisers"): Whisper base with a beam of 5 gets
#: 10.0% of words wrong on unseen voices where tiny.en gets 16.0-17.6% (issue 35), for 2 to 2.6
#: times the compute; decoding starts at a pause (speculation), so the answer comes little later.
#: ``whisper-tiny.en`` stays the fast option.
ASR_MODEL = "whisper-base"
#: ``--llm``: the embedded model where installed (``auto``), none (``builtin``: the rule-based
#: responder, unless ``--llm-base-url`` names an endpoint), or one of ``LLM_MODELS`` by name.
LLM_CHOICES = ("auto", "builtin")
#: The embedded models by name (``livegen.models.llm.weights.EMBEDDED``'s keys, kept here so
#: that checking a flag imports nothing).
LLM_MODELS = ("qwen2.5-coder-1.5b", "smollm2-135m")


@dataclass(frozen=True)
class CascadeSettings:
    """What ``livegen serve`` chose for the cascade; None: the variable's, else the model's default."""

    #: The Silero build of the voice activity detector: one of ``VAD_BACKENDS``.
    vad: str | None = None
    #: The server's recogniser (a name of ``asr.CHOICES`` or of ``asr_model_path``'s directory),
    #: and a local CTranslate2 Whisper directory, one more recogniser.
    asr_model: str | None = None
    asr_model_path: str | None = None
    #: Most utterances decoded in one Whisper call (1: one at a time, in arrival order), batches
    #: decoded at once, and the threads of each.
    asr_batch: int | None = None
    asr_workers: int | None = None
    asr_threads: int | None = None
    #: Speech-synthesis worker processes, and the ONNX threads of each.
    tts_workers: int | None = None
    tts_threads: int | None = None
    #: The language model that answers (``LLM_CHOICES`` or ``LLM_MODELS``), its decoding threads,
    #: its context per session in tokens, and the sessions it answers at once.
    llm: str | None = None
    llm_threads: int | None = None
    llm_context: int | None = None
    llm_parallel: int | None = None

    def __post_init__(self) -> None:
        for name in (field.name for field in fields(self)):
            if (value := getattr(self, name)) is not None:
                object.__setattr__(self, name, checked(name, value, f"{flag(name)} {value!r}"))

    @classmethod
    def of(cls, source: object) -> CascadeSettings:
        """The settings of the same names on ``source`` (``ServerConfig``); one it lacks is None."""
        return cls(**{field.name: getattr(source, field.name, None) for field in fields(cls)})

    def with_env(self, environ: Mapping[str, str] | None = None) -> CascadeSettings:
        """These settings, each one not given taken from its environment variable where it is set."""
        environ = os.environ if environ is None else environ
        found: dict[str, Any] = {}
        for name in (field.name for field in fields(self)):
            raw = environ.get(variable(name), "").strip()
            if getattr(self, name) is None and raw:
                found[name] = checked(name, raw, f"{variable(name)}={raw!r}")
        return replace(self, **found)


def flag(name: str) -> str:
    """The ``livegen serve`` option of setting ``name``."""
    return "--" + name.replace("_", "-")


def variable(name: str) -> str:
    """The environment variable of setting ``name``: its fallback when the option is not given."""
    return "LIVEGEN_" + name.upper()


def checked(name: str, value: object, source: str) -> str | int:
    """``value`` of setting ``name``, parsed and checked; ``source`` (the flag or the variable,
    and the value) names it in the error."""
    if name == "vad":
        backend = str(value).strip().lower()
        if backend not in VAD_BACKENDS:
            raise ConfigError(f"unknown voice activity detector {source}; choose {' or '.join(VAD_BACKENDS)}")
        return backend
    if name == "llm":
        choice = str(value).strip().lower()
        if choice not in (*LLM_CHOICES, *LLM_MODELS):
            raise ConfigError(
                f"unknown language model {source}; choose one of {', '.join(LLM_CHOICES + LLM_MODELS)}"
            )
        return choice
    if name not in COUNTS:
        return str(value)
    try:
        count = int(str(value))
    except ValueError:
        raise ConfigError(f"{source}: not a whole number") from None
    if count < 1:
        raise ConfigError(f"{source}: must be at least 1")
    return count
