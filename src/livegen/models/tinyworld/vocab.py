"""The net's discrete inputs: the room game's actions and themes, by embedding row.

Serving (``model.py``, ``sampling.py``) and training (``livegen.training``)
must agree on these rows, since the shipped weights were trained with them;
they live here, on the serving side, so training imports serving and never
the reverse.
"""

from __future__ import annotations

from livegen.models.room import game

ACTION_INDEX = {name: i for i, name in enumerate(game.ACTIONS)}
THEME_INDEX = {name: i for i, name in enumerate(game.THEMES)}
