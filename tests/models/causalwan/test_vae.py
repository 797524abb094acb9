"""The tiny Wan VAE decoded a chunk at a time, its causal state carried, equals one call."""

from __future__ import annotations

from typing import Any

import torch

from livegen.models.causalwan.vae import DecoderState, decode_chunk, denormalize, state_bytes


def test_chunked_causal_decode_equals_the_one_shot_decode(model: Any) -> None:
    vae = model.vae
    latents = torch.randn(1, 4, 7, 8, 8, generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        whole = vae.decode(denormalize(vae, latents)).sample
        state, parts = DecoderState(), []
        for start, stop in ((0, 3), (3, 6), (6, 7)):
            part, state = decode_chunk(vae, latents[:, :, start:stop], state)
            parts.append(part)
    chunked = torch.cat(parts, dim=2)
    assert chunked.shape == whole.shape == (1, 3, 1 + 4 * 6, 64, 64)
    torch.testing.assert_close(chunked, whole, atol=1e-5, rtol=0)
    assert state.nbytes() == state_bytes(vae, 8, 8, torch.float32) > 0
