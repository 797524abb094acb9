"""A world model test double that takes keys, mouse and camera like causal Wan, without torch.

``controlled-world`` declares the real ``livegen.keys.v1``, ``livegen.mouse.v1``
and ``livegen.camera.v1`` tracks (``world/schema.py``) and turns each tick's
controls into numbers the way ``models/causalwan/controls.py`` does, with
``float()`` and ``int()``: a value no float holds raises there, and a value that
is not finite is refused, as it would poison a real model's frames. So a server
serving it shows over the wire what a control value that passed the schema does
to the batched step every session shares. Frames are a pure function of the
seed, the chunk index and the control numbers, the same alone or batched (W6).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from livegen.errors import StateEvicted
from livegen.models import ModelInfo, Registry
from livegen.models.controls import CAMERA_SCHEMA, CAMERA_V1, KEYS_SCHEMA, KEYS_V1, MOUSE_SCHEMA, MOUSE_V1
from livegen.models.registry import Kind
from livegen.models.world import Chunk, ControlTrack, Tick, WorldSpec

NAME = "controlled-world"
KEYS = ("KeyW", "KeyA", "KeyS", "KeyD", "Space")
SPEC = WorldSpec(
    width=8,
    height=8,
    fps=16.0,
    frames_per_chunk=2,
    controls=(
        ControlTrack("keys", KEYS_V1, KEYS_SCHEMA, {"down": [], "taps": []}, is_sticky=True),
        ControlTrack("mouse", MOUSE_V1, MOUSE_SCHEMA, {"dx": 0, "dy": 0, "wheel": 0, "buttons": 0}),
        ControlTrack("camera", CAMERA_V1, CAMERA_SCHEMA, {"velocity": {}}, is_sticky=True),
    ),
)


def control_numbers(controls: Mapping[str, Any]) -> list[float]:
    """A tick's controls as numbers, as causal Wan's ``controls.encode`` computes them."""
    keys = controls.get("keys") or {}
    numbers = [float(code in keys.get("down", ())) for code in KEYS]
    numbers += [float(code in keys.get("taps", ())) for code in KEYS]
    mouse = controls.get("mouse") or {}
    numbers += [float(mouse.get(name, 0)) for name in ("dx", "dy", "wheel")]
    numbers.append(float(int(mouse.get("buttons", 0)) & 7))
    camera = controls.get("camera") or {}
    velocity = camera.get("velocity") or {}
    numbers += [float(velocity.get(name, 0)) for name in ("vx", "vy", "vz", "yaw", "pitch", "roll")]
    pose = camera.get("pose")
    if pose:
        numbers += [float(p) for p in pose["position"]]
        rotation = [float(q) for q in pose["rotation"]]
        norm = math.sqrt(sum(q * q for q in rotation))
        numbers += [q / norm for q in rotation]
        numbers += [float(pose["intrinsics"][n]) for n in ("fx", "fy", "cx", "cy")]
    if not all(math.isfinite(n) for n in numbers):
        raise ValueError(f"control numbers not finite: {numbers}")
    return numbers


class ControlledWorld:
    name = NAME
    spec = SPEC

    def __init__(self) -> None:
        self.sessions: set[str] = set()

    def new_kv_storage(self, num_pages: int) -> None:
        return None

    def step(self, ticks: Sequence[Tick], kv_storage: Any) -> list[Chunk]:
        chunks = []
        for tick in ticks:  # every tick is checked before any state changes: a step is all or nothing
            if tick.meta.chunk_index > 0 and tick.meta.session_id not in self.sessions:
                raise StateEvicted(f"no state for {tick.meta.session_id}")
            numbers = control_numbers(tick.controls)
            digest = hashlib.sha256(repr((tick.seed, tick.meta.chunk_index, numbers)).encode())
            frames = np.frombuffer(digest.digest()[:2], np.uint8).reshape(2, 1, 1, 1)
            chunks.append(Chunk(tick.meta, np.broadcast_to(frames, (2, 8, 8, 3)).copy()))
        self.sessions.update(tick.meta.session_id for tick in ticks)
        return chunks

    def release(self, session_id: str) -> None:
        self.sessions.discard(session_id)


def load() -> ControlledWorld:
    return ControlledWorld()


def registry() -> Registry:
    entry = ModelInfo(NAME, Kind.WORLD, "world.controlled:load", "keys, mouse and camera: a test double")
    return Registry([entry])
