"""Fuzzing world control values over the wire: a bad value is that client's ``invalid_event`` alone.

A real server serves ``controlled-world`` (``tests/world/controlled.py``: the
real keys, mouse and camera tracks, turned into numbers as causal Wan does).
One client sends a bounded, seeded run of control values: random JSON, huge
integers, non-finite numbers, deep nesting, and values inside the bounds.
Each message gets exactly one answer, accepted or an ``invalid_event`` (or
``invalid_json`` for what is not JSON); every value accepted is stepped without
failing; a bystander session batched beside it keeps its chunks and never sees
an error; the server logs no error.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from livegen.client.world import WorldClient
from livegen.protocol import world as wire
from livegen.server.thread import ServerThread
from world.controlled import registry

NUM_CASES = 160
TRACKS = {"keys": "livegen.keys.v1", "mouse": "livegen.mouse.v1", "camera": "livegen.camera.v1"}
HUGE = ["1" + "0" * 400, "-" + "9" * 60, "9007199254740993", "1e400", "-1e400", "1e308", "1e-400"]


def random_json(rng: random.Random, depth: int = 0) -> str:
    """Any JSON value, as text: what a hostile or broken client might put in ``data``."""
    roll = rng.random()
    if depth > 3 or roll < 0.4:
        return rng.choice([*HUGE, "0", "-3.5", "true", "null", '"KeyW"', '"' + "x" * 40 + '"', "[]", "{}"])
    if roll < 0.7:
        return "[" + ", ".join(random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))) + "]"
    names = ["dx", "dy", "wheel", "buttons", "down", "taps", "velocity", "pose", "vx", "yaw", "x"]
    fields = {rng.choice(names): random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}"


def plausible(rng: random.Random, track: str) -> str:
    """A value of the track's shape with numbers anywhere from fine to far out of range."""
    number = rng.choice([*HUGE, str(rng.uniform(-50, 50)), str(rng.randint(-20_000, 20_000)), "31", "32"])
    if track == "mouse":
        return "{" + f'"{rng.choice(["dx", "dy", "wheel", "buttons"])}": {number}' + "}"
    if track == "keys":
        codes = json.dumps(
            [rng.choice(["KeyW", "Space", "x" * rng.choice([5, 33])])] * rng.choice([1, 64, 65])
        )
        return "{" + f'"{rng.choice(["down", "taps"])}": {codes}' + "}"
    rate = rng.choice(["vx", "vy", "vz", "yaw", "pitch", "roll"])
    return '{"velocity": {' + f'"{rate}": {number}' + "}}"


def cases(rng: random.Random, count: int) -> Iterator[tuple[str, str]]:
    """(track, ``data`` text): plausible shapes, random JSON, deep nesting past the parser's limit."""
    for index in range(count):
        track, roll = rng.choice(list(TRACKS)), rng.random()
        if roll < 0.5:
            yield track, plausible(rng, track)
        elif roll < 0.9:
            yield track, random_json(rng)
        elif roll < 0.95:
            depth = rng.choice([40, 5_000])
            yield track, '{"dx": ' + "[" * depth + "1" + "]" * depth + "}"
        else:
            yield track, '{"dx": NaN}' if index % 2 else '{"dy": Infinity}'


@pytest.fixture
def controlled_server(
    start_server: Callable[..., ServerThread],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> ServerThread:
    monkeypatch.setattr(logging.getLogger("livegen"), "propagate", True)  # after logs.configure() too
    caplog.set_level(logging.INFO)
    server = start_server(registry=registry(), world_model="controlled-world", voice_model="none")
    server.wait_ready()
    return server


async def test_random_control_values_fail_no_session(
    controlled_server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random(30)
    bystander = await WorldClient.connect(controlled_server.ws_url)
    client = await WorldClient.connect(controlled_server.ws_url)
    async with bystander, client:
        await bystander.create()
        await client.create(max_pending_events=1024)
        answers: dict[str, int] = {}
        for event_id, (track, data) in enumerate(cases(rng, NUM_CASES), start=1):
            control = f'{{"track": "{track}", "schema": "{TRACKS[track]}", "data": {data}}}'
            await client.send_raw(
                f'{{"type": "world.event", "event_id": {event_id}, "controls": [{control}]}}'
            )
            answer = await client.next_event()
            key = _check(answer, event_id, data)
            answers[key] = answers.get(key, 0) + 1
        assert answers.get("accepted", 0) > 10 and answers.get("invalid_event", 0) > NUM_CASES // 3, answers
        for other in (client, bystander):  # both go on: later chunks, and no error at all
            first = (await other.next_chunk()).header.chunk_index
            assert (await other.next_chunk()).header.chunk_index == first + 1
            assert other.events.empty(), other.events.get_nowait()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert errors == [] and not any("chunk_failed" in r.getMessage() for r in caplog.records)


def _check(answer: Any, event_id: int, data: str) -> str:
    """The one answer to a control event: accepted, or that client's invalid_event / invalid_json."""
    if isinstance(answer, wire.EventAccepted):
        assert answer.event_id == event_id, (data[:200], answer)
        return "accepted"
    assert isinstance(answer, wire.Error), (data[:200], answer)
    code = answer.error.code
    assert code in ("invalid_event", "invalid_json"), (data[:200], answer)
    if code == "invalid_event":
        assert answer.error.event_id == event_id, (data[:200], answer)
    return code
