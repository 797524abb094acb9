"""Mimi streamed per slot gives the stock MimiModel's codes and audio."""

from __future__ import annotations

import torch

from .inputs import WINDOW


def test_per_slot_streaming_matches_the_stock_codec(model) -> None:  # type: ignore[no-untyped-def]
    mimi, codec, frames = model.model.audio_encoder, model.codec, WINDOW + 4  # past Mimi's window too
    audio = torch.randn(1, 1, 1920 * frames, generator=torch.Generator().manual_seed(0)) * 0.1
    rows = torch.tensor([3])
    codec.reset(3)
    with torch.no_grad():
        whole = mimi.encode(audio, num_quantizers=8).audio_codes[0]
        streamed = torch.stack(
            [codec.encode(audio[..., i * 1920 : (i + 1) * 1920], rows)[0] for i in range(frames)], dim=-1
        )
        assert torch.equal(whole, streamed)
        reference = mimi.decode(whole[None]).audio_values
        pieces = torch.cat([codec.decode(whole[None, :, i], rows) for i in range(frames)], dim=-1)
    assert reference.shape == pieces.shape
    assert (reference - pieces).abs().max().item() < 1e-4
