"""The batched step's depth pass is the stock MoshiDepthDecoder's maths."""

from __future__ import annotations

import torch


def test_depth_codes_match_the_stock_depth_decoder(model) -> None:  # type: ignore[no-untyped-def]
    from transformers import DynamicCache

    generator = torch.Generator().manual_seed(3)
    hidden = torch.randn(3, 1, model.model.config.hidden_size, generator=generator)
    text = torch.tensor([5, 9, 3])
    noise = torch.rand(3, model.num_codebooks, 64, generator=generator)
    with torch.no_grad():
        ours = model._depth(hidden, text, noise)
        depth, cache, token, stock = model.model.depth_decoder, DynamicCache(), text[:, None], []
        for i in range(model.num_codebooks):
            logits = depth(input_ids=token, last_hidden_state=hidden, cache=cache, use_cache=True).logits
            top_k, temperature = model.sampling.audio_top_k, model.sampling.audio_temperature
            token = model._sample(logits[:, -1], noise[:, i], temperature, top_k)[:, None]
            stock.append(token)
    assert torch.equal(ours, torch.cat(stock, dim=1))
