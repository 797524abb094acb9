"""``procedural-world``: the room game of ``game.py`` behind the world-model contract.

Deterministic and exact: no network, no weights, a few microseconds a frame.
Its per-session state is one small frozen ``game.State`` (theme, agent, crate,
coin, bar) plus the next chunk it expects, so the neural ``tiny-world`` can
learn the same rules from its frames. KV geometry is None: the game keeps its
own state, keyed by session id, and forgets it on ``release``.

Control: track ``action``, schema ``livegen.action.v1``, data
``{"action": "none" | "up" | "down" | "left" | "right"}`` (held until
changed), or track ``keys`` (``livegen.keys.v1``: held arrows or WASD, and
taps that move the agent for one frame; ``game.frame_actions``). The prompt
is free text; the first theme word it names (forest, ocean, desert, lava,
snow, night) sets the colours, else the theme stays. The seed fixes the
room's layout.

Two players (``WorldSpec.players``): player 1 steers ``action`` and ``keys``,
player 2 ``action_2`` and ``keys_2``, the second agent, which enters the room
with its first move (``game.enter``), so a session nobody joined makes the
one-player room's frames.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from livegen.errors import ModelContractError, StateEvicted
from livegen.models.room import game
from livegen.models.world import Chunk, Tick, WorldSpec

DESCRIPTION = (
    "A deterministic top-down room game rendered directly (32x32, 16 fps): "
    "move the agent with the 'action' track, pick a colour theme in the prompt; "
    "a second player steers the second agent with 'action_2'."
)


class ProceduralWorld:
    """The room game as a world model: exact frames, state per session."""

    name = "procedural-world"
    spec: WorldSpec = game.room_spec(description=DESCRIPTION, players=2)

    def __init__(self) -> None:
        #: Session id -> (state after the last committed-or-generated chunk, next chunk index).
        self._games: dict[str, tuple[game.State, int]] = {}

    @property
    def num_sessions(self) -> int:
        return len(self._games)

    def new_kv_storage(self, num_pages: int) -> None:
        return None

    def step(self, ticks: Sequence[Tick], kv_storage: Any) -> list[Chunk]:
        """One chunk per tick; checks every tick before touching any session's state."""
        starts = [self._start_state(tick) for tick in ticks]
        results: list[Chunk] = []
        ends: dict[str, tuple[game.State, int]] = {}
        for tick, state in zip(ticks, starts, strict=True):
            state = replace(state, theme=game.theme_from_prompt(tick.prompt, state.theme))
            frames = []
            num_frames = tick.num_frames or self.spec.frames_per_chunk
            seconds = game.frame_actions(tick.controls, num_frames, game.SECOND)
            for action, second in zip(game.frame_actions(tick.controls, num_frames), seconds, strict=True):
                if second != "none" and state.agent2 is None:
                    state = game.enter(state, game.second_agent_home(tick.seed))
                state = game.step(state, action, second)
                frames.append(game.render(state))
            ends[tick.meta.session_id] = (state, tick.meta.chunk_index + 1)
            results.append(Chunk(tick.meta, np.stack(frames)))
        self._games.update(ends)
        return results

    def _start_state(self, tick: Tick) -> game.State:
        session_id, chunk_index = tick.meta.session_id, tick.meta.chunk_index
        if chunk_index == 0:
            return game.new_game(tick.seed, game.theme_from_prompt(tick.prompt))
        held = self._games.get(session_id)
        if held is None:
            raise StateEvicted(
                f"procedural-world holds no state for session {session_id!r} (asked for chunk {chunk_index})"
            )
        state, expected = held
        if chunk_index != expected:
            raise ModelContractError(f"session {session_id!r}: chunk {chunk_index} asked, not {expected}")
        return state

    def release(self, session_id: str) -> None:
        self._games.pop(session_id, None)


def load() -> ProceduralWorld:
    return ProceduralWorld()
