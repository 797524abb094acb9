"""Keys and mouse for causal Wan: control tracks, and how they condition a chunk.

The tracks are ``keys`` (``livegen.keys.v1``) and ``mouse``
(``livegen.mouse.v1``); the session's reducer has already turned a chunk's
events into one value each (held keys, taps, summed motion; see
``world/reducer.py``). Here they become one vector per latent frame:

- a multi-hot of the model's key vocabulary: held keys on every frame of the
  chunk, taps on its first frame only (a tap acts for one frame, never lost);
- the chunk's mouse motion and wheel spread evenly over its frames (scaled by
  ``MOUSE_SCALE``), and the held buttons as three bits.

``ControlEmbedding`` maps that vector to the model's width; it is added to the
timestep embedding of each frame's tokens, which is where Matrix-Game-style
action modules and AdaLN conditioning enter a Wan block. The Self-Forcing
checkpoints are text-only and have no such module (no tracks are declared);
``causal-wan-tiny`` has a randomly initialised one, so its keys and mouse
change the picture in a fixed but meaningless way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from livegen.models.world import ControlTrack
from livegen.world.schema import KEYS_SCHEMA, KEYS_V1, MOUSE_SCHEMA, MOUSE_V1

#: The tiny model's key vocabulary (``KeyboardEvent.code``): WASD, arrows, jump, run.
DEFAULT_KEYS = (
    "KeyW",
    "KeyA",
    "KeyS",
    "KeyD",
    "ArrowUp",
    "ArrowDown",
    "ArrowLeft",
    "ArrowRight",
    "Space",
    "ShiftLeft",
)
#: Pixels of pointer motion that make one unit of the embedding's input.
MOUSE_SCALE = 1 / 32
MOUSE_INPUTS = 6  # dx, dy, wheel, three button bits


def tracks(keys: Sequence[str]) -> tuple[ControlTrack, ...]:
    """The tracks a model with this key vocabulary declares."""
    return (
        ControlTrack(
            name="keys",
            schema=KEYS_V1,
            json_schema=KEYS_SCHEMA,
            default={"down": [], "taps": []},
            is_sticky=True,
            description=f"keys held down and tapped (KeyboardEvent.code); this model knows {', '.join(keys)}",
        ),
        ControlTrack(
            name="mouse",
            schema=MOUSE_V1,
            json_schema=MOUSE_SCHEMA,
            default={"dx": 0, "dy": 0, "wheel": 0, "buttons": 0},
            description="pointer motion (CSS px) and wheel, summed over a chunk; buttons held",
        ),
    )


def encode(controls: Mapping[str, Any], keys: Sequence[str], frames: int) -> Tensor:
    """One tick's control vectors, (frames, len(keys) + MOUSE_INPUTS)."""
    index = {key: i for i, key in enumerate(keys)}
    out = torch.zeros(frames, len(keys) + MOUSE_INPUTS)
    key_data = controls.get("keys") or {}
    for key in key_data.get("down", ()):
        if key in index:
            out[:, index[key]] = 1.0
    for key in key_data.get("taps", ()):
        if key in index:
            out[0, index[key]] = 1.0
    mouse = controls.get("mouse") or {}
    base = len(keys)
    for offset, name in enumerate(("dx", "dy", "wheel")):
        out[:, base + offset] = float(mouse.get(name, 0)) * MOUSE_SCALE / frames
    buttons = int(mouse.get("buttons", 0))
    for bit in range(3):
        out[:, base + 3 + bit] = float(buttons >> bit & 1)
    return out


class ControlEmbedding(nn.Module):
    """Control vector -> an addition to the timestep embedding (zero for no input)."""

    def __init__(self, num_keys: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(num_keys + MOUSE_INPUTS, dim, bias=False)

    def forward(self, controls: Tensor) -> Tensor:
        return self.proj(controls)  # type: ignore[no-any-return]
