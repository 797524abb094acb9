"""Exporting a training run as the weights ``tiny-world`` ships (``livegen train-world --export``).

Writes what ``livegen.models.tinyworld.weights`` loads and checks: the EMA
(or raw) weights as fp16 CPU tensors, and beside them the manifest with
their sha256, the network config, the training facts the closing figures
quote, and each theme's colour codebook read from training frames.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from livegen.models.tinyworld.weights import MANIFEST_FILE, sha256
from livegen.training.tinyworld.data import theme_palettes


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
