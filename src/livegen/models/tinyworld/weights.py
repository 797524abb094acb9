"""The shipped tiny-world checkpoint, loaded offline and verified.

The package carries ``models/tinyworld/shipped/tiny_world.pt`` (the EMA
weights in fp16, a plain tensor dict loaded with ``weights_only=True``) and
``tiny_world.json`` (its sha256, the network config, the training facts the
closing figures quote, and each theme's colour codebook read from the
training frames, which generated pixels snap to). Loading refuses a file whose digest does not
match, so a truncated or swapped checkpoint fails loudly instead of
generating noise. Writing them is training's job (``livegen.training.tinyworld.export``).
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from livegen.errors import ModelError
from livegen.models.tinyworld.net import Config, Net

WEIGHTS_FILE = "tiny_world.pt"
MANIFEST_FILE = "tiny_world.json"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def shipped_dir() -> Path:
    return Path(str(resources.files("livegen.models.tinyworld") / "shipped"))


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
