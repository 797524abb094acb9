"""``moshi`` weights from a local directory in the transformers layout, checked by sha256 before loading.

The directory (``--voice-model-path``) holds what the user downloaded, e.g. ``kmhf/hf-moshiko``::

    DIR/config.json           MoshiConfig (with its Mimi audio_encoder_config)
    DIR/*.safetensors         the weights (and model.safetensors.index.json when sharded)
    DIR/tokenizer*            optional: the text tokenizer, to read the inner text (else text is "")
    DIR/livegen.json          optional: ``max_sessions``, ``text_pad_id``, ``text_end_of_padding_id``
    DIR/SHA256SUMS            required: ``sha256sum`` lines covering config.json and every
                              *.safetensors; make it once, where the download is trusted, with
                              ``cd DIR && sha256sum config.json *.safetensors > SHA256SUMS``

Nothing reaches a model hub: ``HF_HUB_OFFLINE`` is set and every load passes
``local_files_only=True``. A missing file, a file the manifest leaves out, a checksum that does not
match, or weights that do not fit the configuration is a ``ConfigError`` naming the file (the
server reports it in ``/health`` as it does for ``causal-wan``).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch

from livegen.errors import ConfigError
from livegen.models.moshi.loader import DEFAULT_MAX_SESSIONS, END_OF_PADDING_ID, PAD_ID
from livegen.models.moshi.model import MoshiLockstep, TextVocab

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SETTINGS = {"max_sessions", "text_pad_id", "text_end_of_padding_id"}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(root: Path) -> int:
    """Check ``SHA256SUMS`` covers config.json and every safetensors file, and that each matches."""
    manifest = root / "SHA256SUMS"
    if not manifest.is_file():
        raise ConfigError(
            f"{manifest} is missing: moshi checks its weights before loading them; make it once with "
            f"`cd {root} && sha256sum config.json *.safetensors > SHA256SUMS`"
        )
    listed: dict[str, str] = {}
    for line in manifest.read_text().splitlines():
        expected, _, name = line.strip().partition(" ")
        if name.strip():
            listed[name.strip().lstrip("*")] = expected.lower()
    needed = ["config.json", *sorted(p.name for p in root.glob("*.safetensors"))]
    if unlisted := [name for name in needed if name not in listed]:
        raise ConfigError(f"{manifest} does not list {', '.join(unlisted)}")
    for name, expected in listed.items():
        target = root / name
        if not target.is_file():
            raise ConfigError(f"{target} is listed in {manifest} but missing")
        if _sha256(target) != expected:
            raise ConfigError(f"{target} does not match its sha256 in {manifest}")
    return len(listed)


def _settings(root: Path) -> dict[str, int]:
    path = root / "livegen.json"
    settings: dict[str, int] = json.loads(path.read_text()) if path.is_file() else {}
    if unknown := sorted(set(settings) - SETTINGS):
        raise ConfigError(f"{path} has unknown fields {unknown}; known: {sorted(SETTINGS)}")
    return settings


def _vocab(root: Path, settings: dict[str, int]) -> TextVocab:
    pad = int(settings.get("text_pad_id", PAD_ID))
    end = int(settings.get("text_end_of_padding_id", END_OF_PADDING_ID))
    if not any(root.glob("tokenizer*")):
        return TextVocab(pad_id=pad, end_of_padding_id=end, decode=lambda token: "")
    from transformers import AutoTokenizer

    tokenizer: Any = AutoTokenizer.from_pretrained(root, local_files_only=True)

    def decode(token: int) -> str:
        piece = tokenizer.convert_ids_to_tokens(token) or ""
        return str(piece).replace("\u2581", " ")  # SentencePiece marks a word's start with U+2581

    return TextVocab(pad_id=pad, end_of_padding_id=end, decode=decode)


def load(path: str | None = None, dtype: str = "auto", device: str = "auto") -> MoshiLockstep:
    """The registry's loader for ``moshi``: ``--voice-model-path DIR`` with its dtype and device."""
    if path is None:
        raise ConfigError("moshi needs --voice-model-path DIR (the weights are not shipped)")
    os.environ["HF_HUB_OFFLINE"] = "1"
    root = Path(path).expanduser()
    if not (root / "config.json").is_file():
        raise ConfigError(f"{root / 'config.json'} is missing: expected a transformers Moshi directory")
    if not any(root.glob("*.safetensors")):
        raise ConfigError(f"{root} has no *.safetensors weights")
    verify(root)
    settings = _settings(root)
    target = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)
    if dtype != "auto" and dtype not in DTYPES:
        raise ConfigError(f"moshi dtype must be auto or one of {', '.join(DTYPES)}, got {dtype!r}")
    torch_dtype = DTYPES.get(dtype, torch.bfloat16 if target.type == "cuda" else torch.float32)
    from transformers import MoshiForConditionalGeneration

    try:
        model = MoshiForConditionalGeneration.from_pretrained(
            root, dtype=torch_dtype, local_files_only=True, attn_implementation="sdpa"
        )
    except (OSError, ValueError, RuntimeError) as exc:
        raise ConfigError(f"cannot load moshi weights from {root}: {exc}") from exc
    model = model.to(target).eval()
    return MoshiLockstep(
        "moshi",
        model,
        _vocab(root, settings),
        max_sessions=int(settings.get("max_sessions", DEFAULT_MAX_SESSIONS)),
        description=f"Moshi from {root}",
    )
