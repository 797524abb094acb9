"""The tiny Moshi, built once per test module, and reproducible input frames."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

#: Frames of context of the test model: small, so runs of a few dozen frames wrap its ring.
WINDOW = 16
MAX_SESSIONS = 6


@pytest.fixture(scope="module")
def model():  # type: ignore[no-untyped-def]
    import torch

    from livegen.models.moshi.loader import build_tiny

    torch.set_num_threads(1)
    return build_tiny(max_sessions=MAX_SESSIONS, window=WINDOW)


@pytest.fixture(autouse=True)
def free_slots(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test starts and ends with an empty pool."""
    yield
    if "model" in request.fixturenames:
        held = request.getfixturevalue("model")
        for slot in held.open_slots():
            held.close_slot(slot)


def frames(seed: int, count: int, samples: int = 1920) -> list[bytes]:
    """``count`` frames of loud noise (PCM16), the same for the same seed."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.normal(0, 3000, samples).clip(-32768, 32767).astype("<i2").tobytes() for _ in range(count)]
