"""The procedural room game: rules and renderer behind ``procedural-world``.

Small on purpose: the embedded neural world model (``tiny-world``) learns this
game from its frames, so every rule is local and visible in the picture. A
32x32 room with walls and a checker floor, an interior wall bar, a crate
(solid), a coin (gone once touched) and a 4x4 agent that moves 2 px per frame.
The prompt picks one of six colour themes; the seed fixes the layout.

Pure functions over a frozen ``State``: ``new_game``, ``step``, ``render``.
No clock, no global randomness: the layout comes from a generator seeded by the
caller, so one seed always gives one room.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from livegen.models.controls import KEYS_SCHEMA, KEYS_V1
from livegen.models.world import ControlTrack, KVGeometry, WorldSpec

SIZE = 32
WALL = 2
AGENT = 4
CRATE = 4
COIN = 2
STEP_PX = 2

THEMES: tuple[str, ...] = ("forest", "ocean", "desert", "lava", "snow", "night")
ACTIONS: tuple[str, ...] = ("none", "up", "down", "left", "right")
MOVES = {"none": (0, 0), "up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}

# wall, floor a, floor b, bar, crate, coin, agent
_PALETTES: dict[str, tuple[tuple[int, int, int], ...]] = {
    "forest": (
        (34, 68, 34),
        (110, 160, 80),
        (96, 144, 70),
        (70, 50, 30),
        (150, 100, 50),
        (250, 220, 40),
        (230, 40, 40),
    ),
    "ocean": (
        (20, 40, 110),
        (60, 140, 200),
        (50, 125, 185),
        (230, 220, 170),
        (120, 80, 60),
        (250, 220, 40),
        (250, 120, 30),
    ),
    "desert": (
        (150, 100, 50),
        (230, 200, 140),
        (215, 185, 125),
        (180, 120, 70),
        (110, 80, 50),
        (250, 240, 90),
        (40, 90, 200),
    ),
    "lava": (
        (50, 20, 20),
        (200, 70, 20),
        (180, 55, 15),
        (30, 30, 30),
        (120, 110, 100),
        (250, 230, 60),
        (60, 220, 240),
    ),
    "snow": (
        (150, 170, 190),
        (240, 245, 250),
        (225, 232, 242),
        (110, 130, 160),
        (140, 100, 70),
        (250, 200, 30),
        (200, 30, 60),
    ),
    "night": (
        (15, 15, 40),
        (45, 45, 80),
        (38, 38, 70),
        (90, 90, 130),
        (100, 80, 60),
        (250, 230, 90),
        (120, 250, 120),
    ),
}

#: Both world models of this game (procedural-world, tiny-world) share this timing.
FPS = 16.0
FRAMES_PER_CHUNK = 4

ACTION_TRACK = ControlTrack(
    name="action",
    schema="livegen.action.v1",
    json_schema={
        "type": "object",
        "properties": {"action": {"enum": list(ACTIONS)}},
        "required": ["action"],
        "additionalProperties": False,
    },
    default={"action": "none"},
    is_sticky=True,
    description="Move the agent 2 px per frame while held; send 'none' to stop.",
)


KEYS_TRACK = ControlTrack(
    name="keys",
    schema=KEYS_V1,
    json_schema=KEYS_SCHEMA,
    default={"down": [], "taps": []},
    is_sticky=True,
    description="Arrow keys or WASD (KeyboardEvent.code): a held key moves the agent like 'action'; "
    "a tap, even one shorter than a chunk, moves it for one frame.",
)
#: Keys the room game understands, by ``KeyboardEvent.code``.
DIRECTION_KEYS = {
    "ArrowUp": "up",
    "KeyW": "up",
    "ArrowDown": "down",
    "KeyS": "down",
    "ArrowLeft": "left",
    "KeyA": "left",
    "ArrowRight": "right",
    "KeyD": "right",
}


def frame_actions(controls: Mapping[str, Any], num_frames: int) -> list[str]:
    """The action of each frame of a chunk: taps first (one frame each), else the held key, else
    the ``action`` track."""
    data = controls.get("action")
    held = data.get("action", "none") if isinstance(data, Mapping) else "none"
    held = held if held in ACTIONS else "none"
    keys = controls.get("keys")
    keys = keys if isinstance(keys, Mapping) else {}
    downs = [DIRECTION_KEYS[k] for k in keys.get("down", ()) if k in DIRECTION_KEYS]
    held = downs[-1] if downs else held
    taps = [DIRECTION_KEYS[k] for k in keys.get("taps", ()) if k in DIRECTION_KEYS]
    return [taps[k] if k < len(taps) else held for k in range(num_frames)]


def room_spec(
    kv: KVGeometry | None = None, description: str = "", *, accepts_seed_image: bool = False
) -> WorldSpec:
    """The spec both models of the room game serve: same frames, timing and controls.

    Only tiny-world takes a seed image (a 32x32 first frame it continues from); procedural-world
    renders the game itself, so an image has nothing to start.
    """
    return WorldSpec(
        width=SIZE,
        height=SIZE,
        fps=FPS,
        frames_per_chunk=FRAMES_PER_CHUNK,
        controls=(ACTION_TRACK, KEYS_TRACK),
        kv=kv,
        description=description,
        accepts_seed_image=accepts_seed_image,
        min_frames_per_chunk=1,  # both models make any number of frames a chunk
    )


Rect = tuple[int, int, int, int]  # x, y, width, height
Frame = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class State:
    theme: str
    agent: tuple[int, int]
    crate: tuple[int, int]
    coin: tuple[int, int] | None
    bar: Rect


def theme_from_prompt(prompt: str, current: str = THEMES[0]) -> str:
    """The first theme word the prompt names, else the current theme."""
    for word in re.findall(r"[a-z]+", prompt.lower()):
        if word in THEMES:
            return str(word)
    return current


def new_game(seed: int, theme: str = THEMES[0]) -> State:
    """A room laid out by ``seed``; the agent, crate and coin never start overlapping."""
    rng = np.random.default_rng(seed)
    inner = SIZE - 2 * WALL
    horizontal = bool(rng.integers(2))
    length = int(rng.integers(8, 15))
    along = int(rng.integers(WALL + 2, SIZE - WALL - length - 1))
    across = int(rng.integers(WALL + 8, SIZE - WALL - 10))
    bar = (along, across, length, 2) if horizontal else (across, along, 2, length)
    taken: list[Rect] = [bar]

    def place(size: int) -> tuple[int, int]:
        while True:
            x, y = (int(v) * 2 + WALL for v in rng.integers(0, (inner - size) // 2 + 1, size=2))
            rect = (x, y, size, size)
            if not any(_overlap(rect, _grow(other, 1)) for other in taken):
                taken.append(rect)
                return x, y

    agent = place(AGENT)
    crate = place(CRATE)
    coin = place(COIN)
    return State(theme=theme, agent=agent, crate=crate, coin=coin, bar=bar)


def step(state: State, action: str) -> State:
    """One frame of play: move the agent unless a wall, the bar or the crate blocks it."""
    dx, dy = MOVES.get(action, (0, 0))
    if dx == dy == 0:
        return state
    x, y = state.agent[0] + dx * STEP_PX, state.agent[1] + dy * STEP_PX
    if not agent_fits(state, (x, y)):
        return state
    return place_agent(state, (x, y))


def place_agent(state: State, position: tuple[int, int]) -> State:
    """``state`` with the agent at ``position``, taking the coin if it touches it."""
    coin = state.coin
    if coin is not None and _overlap((*position, AGENT, AGENT), (*coin, COIN, COIN)):
        coin = None
    return replace(state, agent=position, coin=coin)


def agent_fits(state: State, position: tuple[int, int]) -> bool:
    """Whether the agent may stand at ``position``: inside the walls, off the bar and the crate."""
    rect = (*position, AGENT, AGENT)
    return (
        _inside(rect) and not _overlap(rect, state.bar) and not _overlap(rect, (*state.crate, CRATE, CRATE))
    )


def render(state: State) -> Frame:
    """The frame for a state: (32, 32, 3) uint8."""
    wall, floor_a, floor_b, bar, crate, coin, agent = _PALETTES[state.theme]
    frame = np.empty((SIZE, SIZE, 3), dtype=np.uint8)
    ys, xs = np.indices((SIZE, SIZE))
    checker = ((xs // 4 + ys // 4) % 2).astype(bool)
    frame[:] = floor_a
    frame[checker] = floor_b
    frame[:WALL], frame[-WALL:], frame[:, :WALL], frame[:, -WALL:] = wall, wall, wall, wall
    _fill(frame, state.bar, bar)
    _fill(frame, (*state.crate, CRATE, CRATE), crate)
    frame[
        state.crate[1] + 1 : state.crate[1] + CRATE - 1, state.crate[0] + 1 : state.crate[0] + CRATE - 1
    ] = (np.array(crate) * 0.7).astype(np.uint8)
    if state.coin is not None:
        _fill(frame, (*state.coin, COIN, COIN), coin)
    _fill(frame, (*state.agent, AGENT, AGENT), agent)
    return frame


def agent_centre(state: State) -> tuple[float, float]:
    return state.agent[0] + AGENT / 2, state.agent[1] + AGENT / 2


def _fill(frame: Frame, rect: Rect, colour: tuple[int, int, int]) -> None:
    x, y, w, h = rect
    frame[y : y + h, x : x + w] = colour


def _overlap(a: Rect, b: Rect) -> bool:
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def _grow(rect: Rect, by: int) -> Rect:
    return (rect[0] - by, rect[1] - by, rect[2] + 2 * by, rect[3] + 2 * by)


def _inside(rect: Rect) -> bool:
    x, y, w, h = rect
    return x >= WALL and y >= WALL and x + w <= SIZE - WALL and y + h <= SIZE - WALL
