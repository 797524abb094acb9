"""A recogniser from a user's directory (``--asr-model-path``): a CTranslate2 Whisper, or one of
the transformers families (``transformers_asr``), chosen by what the directory holds. Here, beside
both kinds, so that the cascade's Whisper module (``cascade/asr.py``) names neither this folder
nor the transformers adapter, which builds on its ``Recognizer``.
"""

from __future__ import annotations

from pathlib import Path

from livegen.errors import ConfigError
from livegen.models.asr import transformers_asr
from livegen.models.cascade import asr


def local_choice(path: str | Path) -> asr.Choice:
    """A recogniser from a local directory (``--asr-model-path``), named after it: CTranslate2
    Whisper, or a transformers speech-to-text model (``models/asr/transformers_asr``) when its
    ``config.json`` names one of those families.

    Checked before anything loads, so a wrong path fails at startup by name,
    not at the first turn: the directory must hold ``model.bin``,
    ``config.json``, ``tokenizer.json`` (faster-whisper would otherwise
    fetch a tokenizer from a hub) and a vocabulary, and its name must not be a packaged one's.
    Greedy, as a bigger model is chosen for accuracy and a beam multiplies its cost.
    """
    directory = Path(path).expanduser().resolve()
    if not directory.is_dir():
        raise ConfigError(f"--asr-model-path {str(path)!r} is not a directory")
    if directory.name in asr.CHOICES:
        raise ConfigError(f"--asr-model-path {str(directory)!r} has the name of a packaged recogniser")
    if (family := transformers_asr.family_of(directory)) is not None:
        name = directory.name
        return asr.Choice(
            name,
            f"{family.model_class} (transformers) from {directory}",
            lambda: directory,
            loader=lambda threads, workers: transformers_asr.from_directory(directory, name, threads),
        )
    missing = [name for name in LOCAL_FILES if not (directory / name).is_file()]
    if not any((directory / name).is_file() for name in VOCABULARIES):
        missing.append(" or ".join(VOCABULARIES))
    if missing:
        raise ConfigError(
            f"--asr-model-path {str(directory)!r} is no CTranslate2 Whisper model: it lacks "
            f"{', '.join(missing)} (convert one with ct2-transformers-converter --copy_files tokenizer.json)"
        )
    return asr.Choice(directory.name, f"CTranslate2 Whisper from {directory}, int8", lambda: directory)


#: What a CTranslate2 Whisper directory holds.
LOCAL_FILES = ("model.bin", "config.json", "tokenizer.json")
#: CTranslate2's vocabulary, in one of its two formats.
VOCABULARIES = ("vocabulary.json", "vocabulary.txt")
