"""``causal-wan`` weights from a local directory: the Wan 2.1 diffusers layout plus a causal checkpoint.

The directory (``--world-model-path``) holds what the user downloaded, e.g.
``Wan-AI/Wan2.1-T2V-1.3B-Diffusers`` with a Self-Forcing-style causal
checkpoint put beside it::

    DIR/transformer/   config.json + *.safetensors   (WanTransformer3DModel)
    DIR/vae/           config.json + *.safetensors   (AutoencoderKLWan)
    DIR/text_encoder/  config.json + *.safetensors   (UMT5EncoderModel)
    DIR/tokenizer/     the umT5 tokenizer
    DIR/causal.pt | causal.safetensors | self_forcing_dmd.pt   optional: the causal student's
                       weights (key ``generator_ema``/``generator`` or a bare state dict, original
                       Wan names or diffusers names), loaded over ``transformer/``
    DIR/livegen.json   optional: serving geometry (``CausalWanConfig`` fields, ``height``/``width``
                       in pixels)
    DIR/SHA256SUMS     optional: ``sha256sum`` lines; every file listed is checked before loading

Nothing reaches a model hub: ``HF_HUB_OFFLINE`` is set and every load passes
``local_files_only=True``. A missing file, a checksum that does not match or
a checkpoint whose tensors do not fit the transformer is a ``ConfigError``
naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import torch

from livegen.errors import ConfigError
from livegen.models.causalwan.config import CausalWanConfig
from livegen.models.causalwan.loader import text_encoder_fn
from livegen.models.causalwan.model import CausalWan
from livegen.models.causalwan.vae import state_bytes

PARTS = ("transformer", "vae", "text_encoder", "tokenizer")
CAUSAL_NAMES = ("causal.safetensors", "causal.pt", "self_forcing_dmd.pt")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def verify(root: Path) -> int:
    """Check every file ``SHA256SUMS`` lists; returns how many (0 without a manifest)."""
    manifest = root / "SHA256SUMS"
    if not manifest.is_file():
        return 0
    count = 0
    for line in manifest.read_text().splitlines():
        if not line.strip():
            continue
        expected, _, name = line.strip().partition(" ")
        target = root / name.strip().lstrip("*")
        if not target.is_file():
            raise ConfigError(f"{target} is listed in {manifest} but missing")
        digest = hashlib.sha256()
        with target.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != expected.lower():
            raise ConfigError(f"{target} does not match its sha256 in {manifest}")
        count += 1
    return count


def _check_layout(root: Path) -> None:
    if not root.is_dir():
        raise ConfigError(f"--world-model-path {root} is not a directory")
    for part in PARTS[:3]:
        if not (root / part / "config.json").is_file():
            raise ConfigError(
                f"{root / part / 'config.json'} is missing: expected the Wan 2.1 diffusers layout"
            )
    if not (root / "tokenizer").is_dir():
        raise ConfigError(f"{root / 'tokenizer'} is missing: expected the Wan 2.1 diffusers layout")


def _causal_state(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state: Any = load_file(str(path))
    else:
        state = torch.load(path, map_location="cpu", weights_only=True)
    for key in ("generator_ema", "generator", "state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
            break
    state = {(k[len("model.") :] if k.startswith("model.") else k): v for k, v in state.items()}
    if any(k.startswith("blocks.0.self_attn.") for k in state):  # original Wan names
        from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers

        state = convert_wan_transformer_to_diffusers(state)
    return dict(state)


def _load_causal(transformer: Any, root: Path) -> Path | None:
    path = next((root / name for name in CAUSAL_NAMES if (root / name).is_file()), None)
    if path is None:
        return None
    state = _causal_state(path)
    own = transformer.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    wrong = sorted(k for k in set(own) & set(state) if tuple(own[k].shape) != tuple(state[k].shape))
    if missing or unexpected or wrong:
        raise ConfigError(
            f"{path} does not fit {root / 'transformer'}: missing {missing[:3]}, "
            f"unexpected {unexpected[:3]}, wrong shape {wrong[:3]}"
        )
    transformer.load_state_dict(state, strict=True)
    return path


def _serving_config(root: Path, in_channels: int) -> CausalWanConfig:
    extra: dict[str, Any] = {}
    settings = root / "livegen.json"
    if settings.is_file():
        extra = json.loads(settings.read_text())
    height, width = int(extra.pop("height", 480)), int(extra.pop("width", 832))
    known = {f.name for f in fields(CausalWanConfig)}
    if unknown := sorted(set(extra) - known):
        raise ConfigError(f"{settings} has unknown fields {unknown}")
    if "sigmas" in extra:
        extra["sigmas"] = tuple(extra["sigmas"])
    return CausalWanConfig(
        latent_height=height // 8,
        latent_width=width // 8,
        in_channels=in_channels,
        keys=(),
        description="causal Wan 2.1 from local weights (text prompt only)",
        **extra,
    )


def load(path: str | None = None, dtype: str = "auto", device: str = "auto") -> CausalWan:
    """The registry's loader for ``causal-wan``: ``--world-model-path`` with its dtype and device."""
    if path is None:
        raise ConfigError("causal-wan needs --world-model-path DIR (the weights are not shipped)")
    os.environ["HF_HUB_OFFLINE"] = "1"
    root = Path(path).expanduser()
    _check_layout(root)
    verify(root)
    target = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)
    if dtype != "auto" and dtype not in DTYPES:
        raise ConfigError(f"--world-dtype must be auto or one of {', '.join(DTYPES)}, got {dtype!r}")
    torch_dtype = DTYPES.get(dtype, torch.bfloat16 if target.type == "cuda" else torch.float32)
    from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanTransformer3DModel
    from transformers import AutoTokenizer, UMT5EncoderModel

    try:
        transformer = WanTransformer3DModel.from_pretrained(
            root / "transformer", torch_dtype=torch_dtype, local_files_only=True
        )
        _load_causal(transformer, root)
        # In the model's dtype, as Self-Forcing runs it: a float32 decoder cache would double its 1.8 GB.
        vae = AutoencoderKLWan.from_pretrained(root / "vae", torch_dtype=torch_dtype, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(root / "tokenizer", local_files_only=True)
        encoder = UMT5EncoderModel.from_pretrained(
            root / "text_encoder", torch_dtype=torch_dtype, local_files_only=True
        )
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load causal-wan weights from {root}: {exc}") from exc
    for module in (transformer, vae, encoder):
        if target.type != "cpu":
            module.to(target)
        module.eval()
    config = _serving_config(root, transformer.config.in_channels)
    config = replace(
        config, decoder_state_bytes=state_bytes(vae, config.latent_height, config.latent_width, torch_dtype)
    )

    def tokenize(prompt: str) -> tuple[torch.Tensor, torch.Tensor]:
        out = tokenizer(
            [prompt], padding="max_length", max_length=config.text_len, truncation=True, return_tensors="pt"
        )
        return out.input_ids, out.attention_mask

    scheduler = FlowMatchEulerDiscreteScheduler(shift=config.shift)
    return CausalWan("causal-wan", config, transformer, vae, text_encoder_fn(encoder, tokenize), scheduler)
