"""The shipped tiny-world checkpoint: export from a training run, and verified offline loading.

The package carries ``models/weights/tiny_world.pt`` (the EMA weights in fp16,
a plain tensor dict loaded with ``weights_only=True``) and
``tiny_world.json`` (its sha256, the network config, the training facts the
closing figures quote, and each theme's colour codebook read from the
training frames, which generated pixels snap to). Loading refuses a file whose digest does not
match, so a truncated or swapped checkpoint fails loudly instead of
generating noise.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from livegen.errors import ModelError
from livegen.models.tinyworld.data import theme_palettes
from livegen.models.tinyworld.net import Config, Net

WEIGHTS_FILE = "tiny_world.pt"
MANIFEST_FILE = "tiny_world.json"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fp16_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict as the package ships it: fp16 CPU tensors (half the size; serving upcasts)."""
    return {name: value.detach().to("cpu", torch.float16).contiguous() for name, value in state.items()}


def export_weights(checkpoint: Path, dest: Path, which: str = "ema", deadband: float | None = None) -> str:
    """Write the EMA (or raw, ``which="model"``) weights of a training checkpoint as fp16 to ``dest``,
    with its manifest beside it; ``deadband``, if given, is the still-pixel deadband these weights
    serve with (tuned on held-out rooms; ``model.load`` reads it)."""
    state = torch.load(checkpoint, weights_only=False, map_location="cpu")
    dest.parent.mkdir(parents=True, exist_ok=True)
    torch.save(fp16_tensors(state[which]), dest)
    digest = sha256(dest)
    metrics = state["metrics"]
    manifest = {
        "sha256": digest,
        "config": state["config"],
        "step": state["step"],
        "train_seconds": round(metrics.get("train_seconds", 0.0), 1),
        "seed": state["seed"],
        "weights": which,
        "last_probe": metrics["probes"][-1] if metrics.get("probes") else None,
        "sessions": metrics.get("sessions", []),
        "palettes": theme_palettes(),
    }
    if deadband is not None:
        manifest["deadband"] = deadband
    dest.with_name(MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n")
    return digest


def shipped_dir() -> Path:
    return Path(str(resources.files("livegen.models") / "weights"))


def load_net(directory: Path | None = None) -> tuple[Net, dict[str, Any]]:
    """The shipped network in fp32 eval mode, after checking the file's sha256 against the manifest."""
    directory = directory or shipped_dir()
    weights, manifest_path = directory / WEIGHTS_FILE, directory / MANIFEST_FILE
    if not weights.exists() or not manifest_path.exists():
        raise ModelError(f"tiny-world weights missing in {directory}")
    manifest = json.loads(manifest_path.read_text())
    digest = sha256(weights)
    if digest != manifest["sha256"]:
        raise ModelError(
            f"tiny-world weights {weights} fail their sha256 check ({digest} != {manifest['sha256']})"
        )
    net = Net(Config(**manifest["config"]))
    tensors = torch.load(weights, weights_only=True, map_location="cpu")
    net.load_state_dict({name: value.to(torch.float32) for name, value in tensors.items()})
    net.eval().requires_grad_(False)
    return net, manifest
