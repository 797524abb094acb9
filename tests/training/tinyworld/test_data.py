"""Training data from the room game: each theme's colour codebook and the clips that start at an obstacle."""

from __future__ import annotations

import numpy as np

from livegen.models.room import game


def test_theme_palettes_are_the_colours_of_that_themes_frames() -> None:
    from livegen.training.tinyworld.data import theme_palettes

    palettes = theme_palettes(num_clips=24)
    assert set(palettes) <= set(game.THEMES) and len(palettes) >= 4
    for theme, colours in palettes.items():
        frame = game.render(game.new_game(3, theme))
        used = {tuple(c) for c in np.unique(frame.reshape(-1, 3), axis=0).tolist()}
        assert used <= {tuple(c) for c in colours}, theme  # every colour a room of the theme uses
        assert len(colours) <= 10  # and not every colour there is


def test_obstacle_clips_start_with_the_agent_pushing_into_the_bar_or_crate() -> None:
    from livegen.training.tinyworld.data import pushing_spots, sample_clips

    state = game.new_game(3)
    spots = pushing_spots(state)
    assert spots
    for position, action in spots:
        here = game.State(state.theme, position, state.crate, None, state.bar)
        assert game.agent_fits(state, position) and game.step(here, action) == here  # blocked
    clips = sample_clips(np.random.default_rng(0), 16, 4, obstacle_share=1.0)
    first_push_blocked = (clips.frames[:, 1] == clips.frames[:, 0]).all(axis=(1, 2, 3))
    assert clips.actions[:, 1].min() > 0 and first_push_blocked.mean() > 0.8  # a coin or theme may change
