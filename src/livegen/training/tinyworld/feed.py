"""The batches of a training run: each drawn from (seed, step) alone, optionally in worker processes.

A step's data depends on nothing but the run's seed and the step number, so a
resumed run draws what it would have drawn, and drawing can move to other
processes without changing a single batch. That matters on a GPU: rendering
the room game is plain Python at about 0.7 ms a clip, so one process feeds a
batch of 256 clips every ~0.2 s, slower than the GPU trains on them. Workers
draw a few steps ahead (bounded, so memory stays flat) and hand batches back
in step order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context

import numpy as np

from livegen.training.tinyworld.data import Clip, sample_clips


@dataclass(frozen=True)
class Recipe:
    """What a step's batch is made of (the training hyperparameters that shape data)."""

    batch: int
    length: int
    obstacle_share: float
    rollout_share: float


@dataclass(frozen=True)
class Drawn:
    """One step's data: the seed of its torch noise, and either game clips or, where the step
    trains on the rollout buffer's streams instead, None."""

    step: int
    noise_seed: int
    clip: Clip | None


def draw(seed: int, recipe: Recipe, step: int) -> Drawn:
    rng = np.random.default_rng([seed, step])
    from_buffer = recipe.rollout_share > 0 and rng.random() < recipe.rollout_share
    noise_seed = int(rng.integers(2**62))
    if from_buffer:
        return Drawn(step, noise_seed, None)
    clip = sample_clips(rng, recipe.batch, recipe.length, obstacle_share=recipe.obstacle_share)
    return Drawn(step, noise_seed, clip)


def batches(seed: int, recipe: Recipe, start: int, workers: int = 0) -> Generator[Drawn, None, None]:
    """Steps start, start + 1, ... in order; drawn in ``workers`` processes when it is above 0."""
    if workers <= 0:
        step = start
        while True:
            yield draw(seed, recipe, step)
            step += 1
    # spawn, not fork: the parent may hold CUDA state and threads that a fork would copy half-made
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        ahead: deque[Future[Drawn]] = deque()
        step = start
        try:
            while True:
                while len(ahead) < 2 * workers:
                    ahead.append(pool.submit(draw, seed, recipe, step))
                    step += 1
                yield ahead.popleft().result()
        finally:
            for future in ahead:
                future.cancel()
