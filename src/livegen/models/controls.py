"""The standard control tracks: keys, mouse and camera, as any world model may offer them.

A contract, as ``models/world.py`` is: a model names these tracks in its
``WorldSpec.controls`` (with these schema names and JSON Schemas) and the
world core checks and reduces their values (``world/schema.py``,
``world/reducer.py``). Both sides import them from here, so a model never
imports the core to describe its controls. Every number and list in them is
bounded, so a value no model can use is refused on entry, for that client alone.
"""

from __future__ import annotations

from typing import Any

#: Keys held down, plus taps: keys pressed and released since the last chunk. Key names are the
#: browser's ``KeyboardEvent.code`` (``KeyW``, ``Space``, ``ArrowLeft``); a model ignores keys it
#: does not know. ``down`` holds until changed; ``taps`` act in one chunk only, for at least one frame.
#: An event names at most ``MAX_KEYS_PER_EVENT`` codes in each list, each at most ``MAX_KEY_CODE_LENGTH``
#: characters (the longest ``KeyboardEvent.code`` is 18); the reducer keeps at most
#: ``MAX_TAPS_PER_CHUNK`` taps per chunk (``reducer.py``).
KEYS_V1 = "livegen.keys.v1"
MAX_KEYS_PER_EVENT = 64
MAX_KEY_CODE_LENGTH = 32
MAX_TAPS_PER_CHUNK = 64
_CODES: dict[str, Any] = {
    "type": "array",
    "items": {"type": "string", "maxLength": MAX_KEY_CODE_LENGTH},
    "maxItems": MAX_KEYS_PER_EVENT,
}
KEYS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "down": {**_CODES, "description": "keys held down"},
        "taps": {**_CODES, "description": "keys pressed and released"},
    },
    "additionalProperties": False,
}

#: Pointer motion as ``MouseEvent.movementX/Y`` (CSS pixels), wheel notches (positive: towards the
#: user, as ``WheelEvent.deltaY``) and ``MouseEvent.buttons``. Motion and wheel are summed over a
#: chunk's events and apply to that chunk only; ``buttons`` holds until changed. Each event's motion is
#: within +-``MAX_MOUSE_MOTION`` pixels and its wheel within +-``MAX_MOUSE_WHEEL`` notches, so a
#: chunk's sums stay finite floats a model can take.
MOUSE_V1 = "livegen.mouse.v1"
MAX_MOUSE_MOTION = 10_000
MAX_MOUSE_WHEEL = 1_000
_MOTION: dict[str, Any] = {"type": "number", "minimum": -MAX_MOUSE_MOTION, "maximum": MAX_MOUSE_MOTION}
MOUSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "dx": _MOTION,
        "dy": _MOTION,
        "wheel": {"type": "number", "minimum": -MAX_MOUSE_WHEEL, "maximum": MAX_MOUSE_WHEEL},
        "buttons": {"type": "integer", "minimum": 0, "maximum": 31},
    },
    "additionalProperties": False,
}

#: A camera, as a velocity or as a pose with intrinsics (exactly one of the two per value). The frame
#: is the camera's own, OpenCV's convention: x right, y down, z forward (the view direction).
#: ``velocity``: translation rates ``vx``, ``vy``, ``vz`` in scene units per second (metres for a
#: metric model), rotation rates ``yaw`` (positive turns right), ``pitch`` (positive looks up) and
#: ``roll`` (positive turns the picture clockwise), in degrees per second; omitted parts are 0.
#: ``pose``: camera-to-world ``position`` [x, y, z] and ``rotation`` as a unit quaternion [w, x, y, z]
#: (components in [-1, 1], normalised on use; a zero quaternion is refused), with ``intrinsics``
#: ``fx``, ``fy``, ``cx``, ``cy`` as fractions of the frame's width and height (a 90 degree
#: horizontal field of view is fx 0.5). A camera value is a state: the last one in a chunk wins
#: and holds until changed.
CAMERA_V1 = "livegen.camera.v1"
MAX_CAMERA_SPEED = 100.0
MAX_CAMERA_TURN = 720.0
_SPEED: dict[str, Any] = {"type": "number", "minimum": -MAX_CAMERA_SPEED, "maximum": MAX_CAMERA_SPEED}
_TURN: dict[str, Any] = {"type": "number", "minimum": -MAX_CAMERA_TURN, "maximum": MAX_CAMERA_TURN}
_VECTOR: dict[str, Any] = {"type": "number", "minimum": -1e6, "maximum": 1e6}
CAMERA_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "velocity": {
            "type": "object",
            "properties": {
                **dict.fromkeys(("vx", "vy", "vz"), _SPEED),
                **dict.fromkeys(("yaw", "pitch", "roll"), _TURN),
            },
            "additionalProperties": False,
        },
        "pose": {
            "type": "object",
            "properties": {
                "position": {"type": "array", "items": _VECTOR, "minItems": 3, "maxItems": 3},
                "rotation": {
                    "type": "array",
                    "items": {"type": "number", "minimum": -1, "maximum": 1},
                    "minItems": 4,
                    "maxItems": 4,
                },
                "intrinsics": {
                    "type": "object",
                    "properties": {
                        "fx": {"type": "number", "minimum": 0.01, "maximum": 100},
                        "fy": {"type": "number", "minimum": 0.01, "maximum": 100},
                        "cx": {"type": "number", "minimum": 0, "maximum": 1},
                        "cy": {"type": "number", "minimum": 0, "maximum": 1},
                    },
                    "required": ["fx", "fy", "cx", "cy"],
                    "additionalProperties": False,
                },
            },
            "required": ["position", "rotation", "intrinsics"],
            "additionalProperties": False,
        },
    },
    "minProperties": 1,
    "maxProperties": 1,
    "additionalProperties": False,
}
