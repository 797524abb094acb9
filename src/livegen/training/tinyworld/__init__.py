"""Training tiny-world: ``train.py`` (the loop and ``livegen train-world``), ``data.py`` (clips
from the room game and the action-following probe), ``feed.py`` (seeded batches, optionally in
worker processes), ``buffer.py`` (long self-rollouts) and ``export.py`` (the shippable weights)."""
