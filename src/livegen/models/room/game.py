"""The procedural room game: rules and renderer behind ``procedural-world``.

Small on purpose: the embedded neural world model (``tiny-world``) learns this
game from its frames, so every rule is local and visible in the picture. A
32x32 room with walls and a checker floor, an interior wall bar, a crate
(solid), a coin (gone once touched) and a 4x4 agent that moves 2 px per frame.
The prompt picks one of six colour themes; the seed fixes the layout. A room
laid out for two players (``new_game(players=2)``, procedural-world) has a
second agent, in the agent's colours inverted, steered by its own tracks
(``action_2``, ``keys_2``); it enters at its seeded place with its first move,
so a room nobody joined is frame for frame the one-player room. The two agents
block each other.

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

#: The second agent's colour in each theme: the first agent's, inverted.
AGENT_2 = {theme: (255 - r, 255 - g, 255 - b) for theme, (*_, (r, g, b)) in _PALETTES.items()}

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


#: The second player's tracks: the first player's, for the second agent (``new_game(players=2)``).
SECOND = "_2"
ACTION_TRACK_2 = replace(
    ACTION_TRACK, name="action" + SECOND, description="Move the second agent, as 'action' moves the first."
)
KEYS_TRACK_2 = replace(
    KEYS_TRACK, name="keys" + SECOND, description="The second agent's keys, as 'keys' are the first's."
)
#: Each player's tracks in a two-player room (``WorldSpec.players``).
TWO_PLAYERS = (("action", "keys"), ("action" + SECOND, "keys" + SECOND))


def frame_actions(controls: Mapping[str, Any], num_frames: int, suffix: str = "") -> list[str]:
    """The action of each frame of a chunk: taps first (one frame each), else the held key, else
    the ``action`` track (``suffix`` ``_2``: the second player's tracks)."""
    data = controls.get("action" + suffix)
    held = data.get("action", "none") if isinstance(data, Mapping) else "none"
    held = held if held in ACTIONS else "none"
    keys = controls.get("keys" + suffix)
    keys = keys if isinstance(keys, Mapping) else {}
    downs = [DIRECTION_KEYS[k] for k in keys.get("down", ()) if k in DIRECTION_KEYS]
    held = downs[-1] if downs else held
    taps = [DIRECTION_KEYS[k] for k in keys.get("taps", ()) if k in DIRECTION_KEYS]
    return [taps[k] if k < len(taps) else held for k in range(num_frames)]


def room_spec(
    kv: KVGeometry | None = None,
    description: str = "",
    *,
    accepts_seed_image: bool = False,
    players: int = 1,
) -> WorldSpec:
    """The spec both models of the room game serve: same frames and timing.

    Only tiny-world takes a seed image (a 32x32 first frame it continues from); procedural-world
    renders the game itself, so an image has nothing to start. Only procedural-world takes two
    players (``players=2``: the second agent's tracks too); tiny-world learnt a room of one agent.
    """
    two = players == 2
    return WorldSpec(
        width=SIZE,
        height=SIZE,
        fps=FPS,
        frames_per_chunk=FRAMES_PER_CHUNK,
        controls=(ACTION_TRACK, KEYS_TRACK, ACTION_TRACK_2, KEYS_TRACK_2)
        if two
        else (ACTION_TRACK, KEYS_TRACK),
        kv=kv,
        description=description,
        accepts_seed_image=accepts_seed_image,
        min_frames_per_chunk=1,  # both models make any number of frames a chunk
        players=TWO_PLAYERS if two else (),
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
    #: The second agent, once it entered the room (``enter``); None in a one-player room.
    agent2: tuple[int, int] | None = None


def theme_from_prompt(prompt: str, current: str = THEMES[0]) -> str:
    """The first theme word the prompt names, else the current theme."""
    for word in re.findall(r"[a-z]+", prompt.lower()):
        if word in THEMES:
            return str(word)
    return current


def new_game(seed: int, theme: str = THEMES[0]) -> State:
    """A room laid out by ``seed``; the agent, crate and coin never start overlapping."""
    return _layout(seed, theme, 1)[0]


def second_agent_home(seed: int) -> tuple[int, int]:
    """Where the second agent of ``seed``'s room enters: placed after the rest, so the rest of the
    room is the one-player room's."""
    return _layout(seed, THEMES[0], 2)[1][0]


def _layout(seed: int, theme: str, players: int) -> tuple[State, list[tuple[int, int]]]:
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
    others = [place(AGENT) for _ in range(players - 1)]
    return State(theme=theme, agent=agent, crate=crate, coin=coin, bar=bar), others


def step(state: State, action: str, action2: str = "none") -> State:
    """One frame of play: move each agent unless a wall, the bar, the crate or the other agent
    blocks it (the first agent moves first)."""
    state = _move(state, action, is_second=False)
    return _move(state, action2, is_second=True) if state.agent2 is not None else state


def _move(state: State, action: str, *, is_second: bool) -> State:
    dx, dy = MOVES.get(action, (0, 0))
    if dx == dy == 0:
        return state
    mover, other = (state.agent2, state.agent) if is_second else (state.agent, state.agent2)
    assert mover is not None
    x, y = mover[0] + dx * STEP_PX, mover[1] + dy * STEP_PX
    if not agent_fits(state, (x, y), other):
        return state
    return place_agent(state, (x, y), is_second=is_second)


def enter(state: State, home: tuple[int, int]) -> State:
    """The second agent enters at ``home``, unless the first agent stands there (it waits)."""
    if state.agent2 is not None or not agent_fits(state, home, state.agent):
        return state
    return place_agent(state, home, is_second=True)


def place_agent(state: State, position: tuple[int, int], *, is_second: bool = False) -> State:
    """``state`` with the agent (or the second one) at ``position``, taking the coin if it touches it."""
    coin = state.coin
    if coin is not None and _overlap((*position, AGENT, AGENT), (*coin, COIN, COIN)):
        coin = None
    if is_second:
        return replace(state, agent2=position, coin=coin)
    return replace(state, agent=position, coin=coin)


def agent_fits(state: State, position: tuple[int, int], other: tuple[int, int] | None = None) -> bool:
    """Whether an agent may stand at ``position``: inside the walls, off the bar, the crate and
    the ``other`` agent."""
    rect = (*position, AGENT, AGENT)
    return (
        _inside(rect)
        and not _overlap(rect, state.bar)
        and not _overlap(rect, (*state.crate, CRATE, CRATE))
        and (other is None or not _overlap(rect, (*other, AGENT, AGENT)))
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
    if state.agent2 is not None:
        _fill(frame, (*state.agent2, AGENT, AGENT), AGENT_2[state.theme])
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
