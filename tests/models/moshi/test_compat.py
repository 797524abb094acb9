"""The lockstep path finds Mimi's pieces and the layers' cache argument in both transformers layouts.

The accelerator machines' image has transformers 5.17 (``past_key_values``, a one-tuple result, Mimi's
pieces side by side on ``MimiModel``); the pinned 5.24 has ``cache``, a tensor result and the pieces
wrapped per side. The installed version exercises one layout end to end (tests/models/moshi); this unit
test holds both, with plain modules in each shape.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from livegen.models.moshi.compat import cache_keyword, mimi_parts, run_layers


class OldLayer(nn.Module):  # 5.17's shape: past_key_values in, (hidden,) out
    def forward(self, hidden: Tensor, past_key_values: Any = None, **kwargs: Any) -> tuple[Tensor]:
        past_key_values.append("old")
        return (hidden + 1,)


class NewLayer(nn.Module):  # 5.24's shape: cache in, hidden out
    def forward(self, hidden: Tensor, cache: Any = None, **kwargs: Any) -> Tensor:
        cache.append("new")
        return hidden * 2


def test_run_layers_passes_the_cache_under_each_versions_name_and_unwraps_tuples() -> None:
    for layer, expected, seen in ((OldLayer(), 2.0, "old"), (NewLayer(), 2.0, "new")):
        calls: list[str] = []
        keyword = cache_keyword(layer)
        out = run_layers([layer], torch.ones(1), keyword, calls)
        assert isinstance(out, Tensor) and float(out) == expected and calls == [seen]
    assert cache_keyword(OldLayer()) == "past_key_values" and cache_keyword(NewLayer()) == "cache"


def test_mimi_parts_finds_the_six_pieces_in_either_layout() -> None:
    pieces = {name: nn.Identity() for name in ("seanet_in", "tr_in", "down", "up", "tr_out", "seanet_out")}
    old = nn.Module()
    old.encoder, old.encoder_transformer, old.downsample = (
        pieces["seanet_in"],
        pieces["tr_in"],
        pieces["down"],
    )
    old.upsample, old.decoder_transformer, old.decoder = pieces["up"], pieces["tr_out"], pieces["seanet_out"]
    new = nn.Module()
    new.encoder, new.decoder = nn.Module(), nn.Module()
    new.encoder.encoder_seanet, new.encoder.encoder_transformer = pieces["seanet_in"], pieces["tr_in"]
    new.encoder.downsample, new.decoder.upsample = pieces["down"], pieces["up"]
    new.decoder.decoder_transformer, new.decoder.decoder_seanet = pieces["tr_out"], pieces["seanet_out"]
    for mimi in (old, new):
        parts = mimi_parts(mimi)
        found = (parts.encoder_seanet, parts.encoder_transformer, parts.downsample, parts.upsample,
                 parts.decoder_transformer, parts.decoder_seanet)  # fmt: skip
        assert [id(p) for p in found] == [id(p) for p in pieces.values()]
