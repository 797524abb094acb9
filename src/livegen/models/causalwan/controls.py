"""Keys, mouse and camera for causal Wan: control tracks, and how they condition a chunk.

The tracks are ``keys`` (``livegen.keys.v1``), ``mouse``
(``livegen.mouse.v1``) and ``camera`` (``livegen.camera.v1``); the
session's reducer has already turned a chunk's events into one value each (held keys, taps, summed motion; see
``world/reducer.py``). Here they become one vector per latent frame:

- a multi-hot of the model's key vocabulary: held keys on every frame of the
  chunk, taps on its first frame only (a tap acts for one frame, never lost);
- the chunk's mouse motion and wheel spread evenly over its frames (scaled by
  ``MOUSE_SCALE``), and the held buttons as three bits;
- the camera (``livegen.camera.v1``) on every frame of the chunk: a velocity
  as its six rates (scaled by ``CAMERA_SPEED_SCALE`` and
  ``CAMERA_TURN_SCALE``), or a pose as position (scaled), unit quaternion and
  intrinsics; no camera input is the zero vector.

``ControlEmbedding`` maps that vector to the model's width; it is added to the
timestep embedding of each frame's tokens, which is where Matrix-Game-style
action modules and AdaLN conditioning enter a Wan block. The Self-Forcing
checkpoints are text-only and have no such module (no tracks are declared);
``causal-wan-tiny`` has a randomly initialised one, so its keys, mouse and camera
change the picture in a fixed but meaningless way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from livegen.models.controls import CAMERA_SCHEMA, CAMERA_V1, KEYS_SCHEMA, KEYS_V1, MOUSE_SCHEMA, MOUSE_V1
from livegen.models.world import ControlTrack

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
#: Velocity rates (6), then a pose: position (3), quaternion (4), intrinsics (4).
CAMERA_INPUTS = 17
#: Scene units per second, and degrees per second, that make one unit of the embedding's input.
CAMERA_SPEED_SCALE = 1 / 10
CAMERA_TURN_SCALE = 1 / 90
#: Scene units of camera position that make one unit of the embedding's input.
CAMERA_POSITION_SCALE = 1 / 10


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
        ControlTrack(
            name="camera",
            schema=CAMERA_V1,
            json_schema=CAMERA_SCHEMA,
            default={"velocity": {}},
            is_sticky=True,
            description="camera velocity (units/s, deg/s) or pose with intrinsics; last one wins, held",
        ),
    )


def encode(controls: Mapping[str, Any], keys: Sequence[str], frames: int) -> Tensor:
    """One tick's control vectors, (frames, len(keys) + MOUSE_INPUTS + CAMERA_INPUTS)."""
    index = {key: i for i, key in enumerate(keys)}
    out = torch.zeros(frames, len(keys) + MOUSE_INPUTS + CAMERA_INPUTS)
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
    out[:, base + MOUSE_INPUTS :] = encode_camera(controls.get("camera") or {})
    return out


def encode_camera(camera: Mapping[str, Any]) -> Tensor:
    """A camera value as its CAMERA_INPUTS numbers (zero for no camera input)."""
    out = torch.zeros(CAMERA_INPUTS)
    velocity = camera.get("velocity") or {}
    for i, name in enumerate(("vx", "vy", "vz")):
        out[i] = float(velocity.get(name, 0)) * CAMERA_SPEED_SCALE
    for i, name in enumerate(("yaw", "pitch", "roll")):
        out[3 + i] = float(velocity.get(name, 0)) * CAMERA_TURN_SCALE
    pose = camera.get("pose")
    if pose:
        out[6:9] = torch.tensor([float(p) for p in pose["position"]]) * CAMERA_POSITION_SCALE
        rotation = torch.tensor([float(q) for q in pose["rotation"]])
        out[9:13] = rotation / rotation.norm()
        intrinsics = pose["intrinsics"]
        out[13:17] = torch.tensor([float(intrinsics[n]) for n in ("fx", "fy", "cx", "cy")])
    return out


class ControlEmbedding(nn.Module):
    """Control vector -> an addition to the timestep embedding (zero for no input)."""

    def __init__(self, num_keys: int, dim: int) -> None:
        super().__init__()
        self.num_inputs = num_keys + MOUSE_INPUTS
        self.proj = nn.Linear(self.num_inputs, dim, bias=False)
        # Its own projection, made after the keys' and mouse's: their weights stay what they were.
        self.camera = nn.Linear(CAMERA_INPUTS, dim, bias=False)

    def forward(self, controls: Tensor) -> Tensor:
        split = self.num_inputs
        return self.proj(controls[..., :split]) + self.camera(controls[..., split:])  # type: ignore[no-any-return]
