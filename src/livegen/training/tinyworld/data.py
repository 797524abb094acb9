"""Training data and the action-following probe for tiny-world, both from the room game.

The data is generated on the fly from the room game (``models/room/game.py``), never stored: each
sample is a short clip of consecutive frames from a random room and theme,
after a random walk so that the agent, coin and crate are anywhere, under
sticky random actions (a held key, as players do). A few clips switch theme
mid-clip, so the model learns to repaint the room when the prompt changes.

The probe finds the agent in a frame by its theme colour, which is how the
figures of action following compare a generated rollout with the game's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

import numpy as np
import numpy.typing as npt

from livegen.models.room import game
from livegen.models.tinyworld.vocab import ACTION_INDEX, THEME_INDEX


@dataclass(frozen=True)
class Clip:
    """A batch of clips: frames (B, T, 32, 32, 3) uint8, and per frame the action that led to it,
    its theme, and a mask of its sprite pixels (agent and coin)."""

    frames: npt.NDArray[np.uint8]
    actions: npt.NDArray[np.int64]
    themes: npt.NDArray[np.int64]
    sprites: npt.NDArray[np.bool_]


def sticky_actions(rng: np.random.Generator, num: int, keep: float = 0.75) -> list[str]:
    """Random actions that are mostly held, like a player's keys."""
    actions: list[str] = []
    current = str(rng.choice(game.ACTIONS))
    for _ in range(num):
        if rng.random() > keep:
            current = str(rng.choice(game.ACTIONS))
        actions.append(current)
    return actions


def held_actions(rng: np.random.Generator, num: int) -> list[str]:
    """Actions as a served session gets them: one per chunk, held for the chunk's frames, a key
    kept for several chunks (how long varies by clip), starting anywhere in a chunk. Long holds
    walk the agent into walls and the bar and keep it pushing there, which is where a rollout
    is most likely to go wrong."""
    fpc = game.FRAMES_PER_CHUNK
    chunks = sticky_actions(rng, num // fpc + 2, keep=float(rng.uniform(0.5, 0.9)))
    offset = int(rng.integers(fpc))
    return [a for a in chunks for _ in range(fpc)][offset : offset + num]


def pushing_spots(state: game.State) -> list[tuple[tuple[int, int], str]]:
    """Every (agent position, action) where the agent stands free and the action pushes it into
    the bar or the crate (not a wall): the collisions a rollout gets wrong most often."""
    lo, hi = game.WALL, game.SIZE - game.WALL - game.AGENT
    spots = []
    for x in range(lo, hi + 1, game.STEP_PX):
        for y in range(lo, hi + 1, game.STEP_PX):
            if not game.agent_fits(state, (x, y)):
                continue
            for action, (dx, dy) in game.MOVES.items():
                nx, ny = x + dx * game.STEP_PX, y + dy * game.STEP_PX
                if (dx or dy) and lo <= nx <= hi and lo <= ny <= hi and not game.agent_fits(state, (nx, ny)):
                    spots.append(((x, y), action))
    return spots


def against_obstacle(
    rng: np.random.Generator, state: game.State, length: int
) -> tuple[game.State, list[str]]:
    """``state`` with its agent moved next to the bar or the crate, and ``length`` actions that
    push into it for a while, then go on as a player would (sliding along it, backing off)."""
    spots = pushing_spots(state)
    if not spots:
        return state, held_actions(rng, length)
    position, push = spots[int(rng.integers(len(spots)))]
    moved = game.place_agent(state, position)
    pushes = int(rng.integers(1, length + 1))
    return moved, [push] * pushes + held_actions(rng, length - pushes)


def sample_clips(
    rng: np.random.Generator,
    batch: int,
    length: int,
    theme_switch_prob: float = 0.05,
    obstacle_share: float = 0.0,
) -> Clip:
    frames = np.empty((batch, length, game.SIZE, game.SIZE, 3), dtype=np.uint8)
    actions = np.zeros((batch, length), dtype=np.int64)
    themes = np.zeros((batch, length), dtype=np.int64)
    sprites = np.zeros((batch, length, game.SIZE, game.SIZE), dtype=np.bool_)
    for b in range(batch):
        theme = str(rng.choice(game.THEMES))
        state = game.new_game(int(rng.integers(2**31)), theme)
        walk = held_actions(rng, int(rng.integers(0, 48)) + length)
        for action in walk[:-length]:
            state = game.step(state, action)
        if rng.random() < obstacle_share:
            state, tail = against_obstacle(rng, state, length - 1)
            walk = ["none", *tail]  # the clip's first frame is where it starts; no action led to it
        switch_at = int(rng.integers(1, length)) if rng.random() < theme_switch_prob else -1
        for i, action in enumerate(walk[-length:]):
            if i == switch_at:
                state = replace(state, theme=str(rng.choice(game.THEMES)))
            if i > 0:
                state = game.step(state, action)
            frames[b, i] = game.render(state)
            actions[b, i] = ACTION_INDEX[action] if i > 0 else 0
            themes[b, i] = THEME_INDEX[state.theme]
            sprites[b, i] = sprite_mask(state)
    return Clip(frames, actions, themes, sprites)


def theme_palettes(num_clips: int = 48, seed: int = 0) -> dict[str, list[list[int]]]:
    """Per theme, every colour its training frames use: the codebook generated pixels snap to.

    Read from rendered clips like the training data (not from the game's tables), so a model
    trained on other frames gets its own codebook the same way."""
    clips = sample_clips(np.random.default_rng(seed), num_clips, 2, theme_switch_prob=0.0)
    palettes: dict[str, list[list[int]]] = {}
    for theme, index in THEME_INDEX.items():
        pixels = clips.frames[clips.themes == index].reshape(-1, 3)
        if len(pixels):
            palettes[theme] = np.unique(pixels, axis=0).tolist()
    return palettes


def sprite_mask(state: game.State) -> npt.NDArray[np.bool_]:
    mask = np.zeros((game.SIZE, game.SIZE), dtype=np.bool_)
    x, y = state.agent
    mask[y : y + game.AGENT, x : x + game.AGENT] = True
    if state.coin is not None:
        cx, cy = state.coin
        mask[cy : cy + game.COIN, cx : cx + game.COIN] = True
    return mask


@cache
def agent_colour(theme: str) -> tuple[int, int, int]:
    """The agent's colour in a theme, read from a rendered frame."""
    state = game.new_game(0, theme)
    x, y = state.agent
    r, g, b = game.render(state)[y + 1, x + 1]
    return int(r), int(g), int(b)


def find_agent(frame: npt.NDArray[np.uint8], theme: str, tolerance: int = 60) -> tuple[float, float] | None:
    """Centre (x, y) of the pixels of the agent's colour, or None if fewer than a quarter of it shows."""
    distance = np.abs(frame.astype(np.int32) - np.array(agent_colour(theme))).sum(axis=-1)
    ys, xs = np.nonzero(distance < tolerance)
    if len(xs) < game.AGENT * game.AGENT // 4:
        return None
    return float(xs.mean()) + 0.5, float(ys.mean()) + 0.5


def agent_errors(frames: npt.NDArray[np.uint8], states: list[game.State]) -> npt.NDArray[np.float64]:
    """Per frame: px from the agent found in ``frames`` to the game's agent (inf where none is found)."""
    errors = np.full(len(states), np.inf)
    for i, (frame, state) in enumerate(zip(frames, states, strict=True)):
        found = find_agent(frame, state.theme)
        if found is not None:
            cx, cy = game.agent_centre(state)
            errors[i] = float(np.hypot(found[0] - cx, found[1] - cy))
    return errors
