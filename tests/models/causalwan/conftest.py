"""The tiny causal-wan, built once per test module (building it imports diffusers: seconds)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def model():  # type: ignore[no-untyped-def]
    import torch

    from livegen.models.causalwan.loader import build_tiny

    torch.set_num_threads(1)
    return build_tiny()
