"""The tiny Moshi, built once per test module, and reproducible input frames."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .inputs import MAX_SESSIONS, WINDOW

pytest.importorskip("torch")
pytest.importorskip("transformers")


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
