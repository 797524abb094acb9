"""The tiny Moshi's sizes and reproducible input frames, shared by this folder's tests.

A module of its own, not the conftest: a test imports it relatively, the way a package does,
which works however pytest was started (a conftest is not importable by name on a clean clone).
"""

from __future__ import annotations

#: Frames of context of the test model: small, so runs of a few dozen frames wrap its ring.
WINDOW = 16
MAX_SESSIONS = 6


def frames(seed: int, count: int, samples: int = 1920) -> list[bytes]:
    """``count`` frames of loud noise (PCM16), the same for the same seed."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.normal(0, 3000, samples).clip(-32768, 32767).astype("<i2").tobytes() for _ in range(count)]
