"""A small JSON Schema check for control data: the subset models declare.

Models describe a track's ``data`` with JSON Schema (shown to clients in
``session.created``). The core checks incoming data against it on entry, so a
bad value is refused with the client's event id instead of failing a chunk
later. Only the keywords our models use are understood: ``type``, ``enum``,
``properties``, ``required``, ``additionalProperties``, ``items``,
``minimum``, ``maximum``, ``minItems``, ``maxItems``, ``maxLength``, ``minProperties``,
``maxProperties``; unknown keywords are ignored, never guessed at.

Every number and list a control schema takes is bounded: a value a model
cannot use (a 400-digit integer that no float holds, a list of thousands of
taps) is refused here, on entry, with ``invalid_event`` for that client alone,
rather than failing the batched model step that every session shares.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from livegen.models.controls import (
    CAMERA_V1,
)

#: A compiled check: (value, path) -> the first problem, or None.
Check = Callable[[Any, str], "str | None"]

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (Mapping,),
    "array": (tuple, list),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def problem(value: Any, schema: Mapping[str, Any], path: str = "data") -> str | None:
    """The first way ``value`` breaks ``schema``, as a sentence; None if it fits."""
    expected = schema.get("type")
    if isinstance(expected, str) and not _is_type(value, expected):
        return f"{path} must be of type {expected}, got {_json_type(value)}"
    if "enum" in schema and value not in schema["enum"]:
        options = ", ".join(repr(v) for v in schema["enum"])
        return f"{path} must be one of {options}, got {value!r}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{path} must be >= {schema['minimum']}, got {_short(value)}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{path} must be <= {schema['maximum']}, got {_short(value)}"
    if isinstance(value, str) and "maxLength" in schema and len(value) > schema["maxLength"]:
        return f"{path} must be at most {schema['maxLength']} characters, got {len(value)}"
    if isinstance(value, Mapping):
        return _object_problem(value, schema, path)
    if isinstance(value, (tuple, list)):
        return _array_problem(value, schema, path)
    return None


def _array_problem(value: tuple[Any, ...] | list[Any], schema: Mapping[str, Any], path: str) -> str | None:
    if "minItems" in schema and len(value) < schema["minItems"]:
        return f"{path} must have at least {schema['minItems']} items, got {len(value)}"
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        return f"{path} must have at most {schema['maxItems']} items, got {len(value)}"
    if isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            found = problem(item, schema["items"], f"{path}[{i}]")
            if found:
                return found
    return None


def _object_problem(value: Mapping[str, Any], schema: Mapping[str, Any], path: str) -> str | None:
    properties: Mapping[str, Any] = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in value:
            return f"{path} lacks the required field {name!r}"
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        return f"{path} needs at least {schema['minProperties']} of the fields {', '.join(properties)}"
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        return f"{path} takes at most {schema['maxProperties']} of the fields {', '.join(properties)}"
    for name, item in value.items():
        if name in properties:
            found = problem(item, properties[name], f"{path}.{name}")
            if found:
                return found
        elif schema.get("additionalProperties") is False:
            return f"{path} has an unknown field {name!r}"
    return None


def _short(number: float) -> str:
    """A number for a message: a huge integer is shown by its size, not in full."""
    if isinstance(number, int) and number.bit_length() > 64:
        return f"an integer of {number.bit_length()} bits"
    return str(number)


def _is_type(value: Any, expected: str) -> bool:
    if expected in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _TYPES.get(expected, (object,)))


def _json_type(value: Any) -> str:
    for name in _TYPES:
        if _is_type(value, name):
            return name
    return type(value).__name__


def compile_schema(schema: Mapping[str, Any]) -> Check:
    """A check for ``schema``, built once per track; fast when the value fits.

    Values that fit pass a few cheap tests (the event path runs this per
    control); anything else goes to ``problem`` for the sentence that says why.
    """
    if not set(schema) <= {"type", "enum", "properties", "required", "additionalProperties", "description"}:
        return lambda value, path: problem(value, schema, path)
    expected = schema.get("type")
    types = (
        ((dict, Mapping) if expected == "object" else _TYPES.get(expected))
        if isinstance(expected, str)
        else None
    )
    is_number = expected in ("integer", "number")
    enum = schema.get("enum")
    required = tuple(schema.get("required", ()))
    is_closed = schema.get("additionalProperties") is False
    properties: Mapping[str, Any] = schema.get("properties", {})
    # A property that is only an enum (the usual shape of a control) is checked inline.
    enums = {name: sub["enum"] for name, sub in properties.items() if set(sub) <= {"enum", "description"}}
    children = {name: compile_schema(sub) for name, sub in properties.items() if name not in enums}

    def check(value: Any, path: str) -> str | None:
        if types is not None and (not isinstance(value, types) or (is_number and type(value) is bool)):
            return problem(value, schema, path)
        if enum is not None and value not in enum:
            return problem(value, schema, path)
        if isinstance(value, dict):
            for name in required:
                if name not in value:
                    return problem(value, schema, path)
            for name, item in value.items():
                allowed = enums.get(name)
                if allowed is not None:
                    if item not in allowed:
                        return problem(value, schema, path)
                    continue
                child = children.get(name)
                if child is None:
                    if is_closed:
                        return problem(value, schema, path)
                elif child(item, path) is not None:
                    return problem(value, schema, path)
        elif isinstance(value, Mapping):
            return problem(value, schema, path)
        return None

    return check


# -- control schemas real world models take, beside the room game's ``livegen.action.v1`` ----------


def camera_problem(value: Any, path: str) -> str | None:
    """What the schema cannot say of a camera value: a rotation must be a quaternion of length > 0."""
    pose = value.get("pose") if isinstance(value, Mapping) else None
    if isinstance(pose, Mapping):
        norm = sum(float(q) ** 2 for q in pose.get("rotation", ())) ** 0.5
        if norm < 1e-6:
            return f"{path}.pose.rotation must be a unit quaternion [w, x, y, z], got length {norm:g}"
    return None


#: Checks beyond JSON Schema, by control schema name, run after the schema check on entry.
SEMANTIC_CHECKS: dict[str, Check] = {CAMERA_V1: camera_problem}
