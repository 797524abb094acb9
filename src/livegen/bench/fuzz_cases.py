"""The message families that once broke sessions, as generators shared by the fuzz tests and bench.

Wrong types are derived from the event structs and the shapes of their nested
objects (``protocol/realtime/fields.py``), so a field added there is fuzzed
without anyone listing it. Deterministic for a given ``random.Random``.
"""

from __future__ import annotations

import itertools
import json
import random
import types
import typing
from collections.abc import Iterator
from typing import Any

import msgspec

from livegen.protocol import realtime as wire
from livegen.protocol.realtime.fields import NESTED

#: The smallest valid body of each voice event, to which a case adds one bad field.
MINIMAL: dict[str, dict[str, Any]] = {
    "session.update": {"session": {}},
    "input_audio_buffer.append": {"audio": "AAAA"},
    "input_audio_buffer.commit": {},
    "input_audio_buffer.clear": {},
    "conversation.item.create": {"item": {}},
    "conversation.item.retrieve": {"item_id": "i"},
    "conversation.item.delete": {"item_id": "i"},
    "conversation.item.truncate": {"item_id": "i", "audio_end_ms": 0},
    "response.create": {},
    "response.cancel": {},
    "output_audio_buffer.clear": {},
    "playback.ack": {"response_id": "r", "played_ms": 0},
    "session.close": {},
    "session.resume": {"session_id": "s", "resume_token": "t"},
}

#: One value of each JSON kind, plus the integers that broke the server before.
ODD_VALUES: list[Any] = [None, True, 0, -1, 1.5, 10**19, 10**400, "x", "", [], [1], {}, {"a": 1}]

#: Kinds that, when valid, start long work (a response, a transcription) or end the session.
HEAVY_WHEN_VALID = frozenset({"response.create", "input_audio_buffer.commit", "session.close"})

Field = tuple[str, tuple[str, ...], Any]


def _structs_in(annotation: Any) -> list[Any]:
    """The msgspec structs (or ``("list", struct)``) an annotation may hold."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _structs_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [s for arg in typing.get_args(annotation) for s in _structs_in(arg)]
    if origin is list:
        return [("list", s) for s in _structs_in(typing.get_args(annotation)[0])]
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return [annotation]
    return []


def field_paths(cls: type[msgspec.Struct], prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every (path, annotation) of a struct and the structs nested in it; ``[0]`` marks a list."""
    hints = typing.get_type_hints(cls, include_extras=True)
    out: list[tuple[tuple[str, ...], Any]] = []
    for field in msgspec.structs.fields(cls):
        path = (*prefix, field.encode_name)
        out.append((path, hints[field.name]))
        for nested in _structs_in(hints[field.name]):
            if isinstance(nested, tuple):
                out += field_paths(nested[1], (*path, "[0]"))
            else:
                out += field_paths(nested, path)
    return out


def voice_fields() -> list[Field]:
    """(event type, path, annotation) of every field of every voice client event."""
    fields: list[Field] = []
    for kind, cls in wire.EVENT_TYPES.items():
        for path, annotation in field_paths(cls):
            fields.append((kind, path, annotation))
            shape = NESTED.get(path[0]) if len(path) == 1 else None
            if shape is not None:
                fields += [(kind, (path[0], *p), a) for p, a in field_paths(shape)]
    return fields


def with_value(body: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """``body`` with ``value`` at ``path``, building the objects (and one-item lists) on the way."""
    body = json.loads(json.dumps(body))
    node: Any = body
    for step, after in itertools.pairwise(path):
        if step == "[0]":
            continue
        child: Any = [{}] if after == "[0]" else {}
        if not isinstance(node.get(step), type(child)):
            node[step] = child
        node = node[step][0] if after == "[0]" else node[step]
    node[path[-1]] = value
    return body


def param(path: tuple[str, ...]) -> str:
    return ".".join(path).replace(".[0]", "[0]")


def fits(value: Any, annotation: Any) -> bool:
    try:
        msgspec.convert(value, annotation)
    except msgspec.ValidationError:
        return False
    return True


def nested(depth: int, kind: str) -> str:
    opening, closing = ("[", "]") if kind == "array" else ('{"a":', "}")
    return opening * depth + "1" + closing * depth


def voice_case(rng: random.Random, family: str, fields: list[Field]) -> str | bytes:
    """One voice message of ``family``: wrong_type, nesting, huge or binary."""
    if family == "nesting":
        return nested(rng.randint(500, 20_000), rng.choice(["array", "object"]))
    if family == "binary":
        return rng.randbytes(rng.randint(0, 64))
    kind, path, annotation = rng.choice(fields)
    value: Any = rng.choice(ODD_VALUES) if family == "wrong_type" else "__huge__"
    if kind in HEAVY_WHEN_VALID and fits(value, annotation):
        value = [[]]  # fits no field: refused
    text = json.dumps({"type": kind, **with_value(MINIMAL[kind], path, value)})
    return text.replace('"__huge__"', rng.choice(["", "-"]) + "9" * rng.randint(19, 5_000))


def voice_cases(rng: random.Random, count: int) -> Iterator[str | bytes]:
    fields = voice_fields()
    for _ in range(count):
        yield voice_case(rng, rng.choice(["wrong_type", "wrong_type", "nesting", "huge", "binary"]), fields)


WORLD_TEMPLATES = [
    '{"type":"world.event","event_id":%s}',
    '{"type":"chunk.ack","chunk_index":%s}',
    '{"type":"session.update","session":{"seed":%s}}',
    '{"type":"world.event","event_id":1,"controls":[{"track":"a","schema":"s","data":%s}]}',
    '{"type":"session.update","session":{"prompt":%s}}',
]


def world_cases(rng: random.Random, count: int) -> Iterator[str | bytes]:
    """Messages a world connection without a session refuses, one error each."""
    for _ in range(count):
        family = rng.choice(["nesting", "huge", "wrong", "binary"])
        if family == "binary":
            yield rng.randbytes(rng.randint(0, 64))
        elif family == "nesting":
            inner = nested(rng.randint(500, 20_000), rng.choice(["array", "object"]))
            yield rng.choice([inner, rng.choice(WORLD_TEMPLATES) % inner])
        elif family == "huge":
            yield rng.choice(WORLD_TEMPLATES[:3]) % ("9" * rng.randint(19, 5_000))
        else:
            wrong = json.dumps(rng.choice([[], {}, True, -1, 1.5]))
            yield rng.choice([WORLD_TEMPLATES[2], WORLD_TEMPLATES[4]]) % wrong


#: Malformed fields of an MCP tool, each refused with ``invalid_value`` naming it.
MCP_ODD_FIELDS: list[dict[str, Any]] = [
    {"server_url": "http://[::1/mcp"},
    {"server_url": "http://127.0.0.1:99999/mcp"},
    {"server_url": "http://127.0.0.1:8o80/mcp"},
    {"server_url": "http://user:secret@127.0.0.1/mcp"},
    {"server_url": "ftp://127.0.0.1/mcp"},
    {"server_url": 7},
    {"headers": {"Host": "internal.example"}},
    {"headers": {"Transfer-Encoding": "chunked"}},
    {"headers": {"Content-Length": "0"}},
    {"headers": {"X-Key": "a\r\nHost: b"}},
    {"headers": {"Bad Name": "x"}},
    {"headers": {f"X-{i}": "x" for i in range(40)}},
    {"headers": ["X-Key"]},
    {"authorization": 5},
    {"require_approval": "sometimes"},
    {"allowed_tools": {"read_only": True}},
    {"server_label": "no spaces allowed"},
    {"connector_id": "connector_gmail"},
]


def mcp_case(rng: random.Random, base: str, attacks: tuple[str, ...]) -> str:
    """A ``session.update`` naming hostile MCP servers (``mcp_hostile``, at ``base``), or one
    MCP tool with a malformed field."""
    if rng.random() < 0.5:
        chosen = rng.sample(attacks, rng.randint(1, min(4, len(attacks))))
        tools = [
            {
                "type": "mcp",
                "server_label": f"h{i}",
                "server_url": f"{base}/{attack}",
                "require_approval": "never",
            }
            for i, attack in enumerate(chosen)
        ]
    else:
        tool = {"type": "mcp", "server_label": "odd", "server_url": f"{base}/ok"}
        tools = [{**tool, **rng.choice(MCP_ODD_FIELDS)}]
    return json.dumps({"type": "session.update", "session": {"type": "realtime", "tools": tools}})
