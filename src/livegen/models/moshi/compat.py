"""The stock Moshi and Mimi modules as the lockstep path walks them, across transformers 5.17 to 5.24.

The lockstep model (``model.py``) and the streaming codec (``codec.py``) call the stock layers
directly with their own per-slot caches. Two things moved between transformers 5.17 (the version
on the accelerator machines' image) and 5.24 (the pinned one):

- a decoder layer's cache argument was ``past_key_values`` and became ``cache``, and the layer
  returned a one-tuple ``(hidden,)`` where it now returns the tensor;
- Mimi's encoder side was ``MimiModel.encoder`` (the SEANet), ``.encoder_transformer`` and
  ``.downsample`` side by side, and is now ``MimiModel.encoder.encoder_seanet``,
  ``.encoder.encoder_transformer`` and ``.encoder.downsample`` (the decoder side likewise).

``Layers`` finds the argument's name once per model (not per call: the step runs at 12.5 Hz for
every session) and ``mimi_parts`` finds the modules wherever the installed version keeps them.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn


def cache_keyword(layer: nn.Module) -> str:
    """The name a stock decoder layer takes its KV cache under."""
    return "cache" if "cache" in inspect.signature(layer.forward).parameters else "past_key_values"


def run_layers(layers: Any, hidden: Tensor, keyword: str, cache: Any, **kwargs: Any) -> Tensor:
    """``hidden`` through each stock layer with ``cache``; a one-tuple result is unwrapped."""
    for layer in layers:
        out = layer(hidden, **{keyword: cache}, **kwargs)
        hidden = out[0] if isinstance(out, tuple) else out
    return hidden


@dataclass(frozen=True)
class MimiParts:
    encoder_seanet: Any
    encoder_transformer: Any
    downsample: Any
    upsample: Any
    decoder_transformer: Any
    decoder_seanet: Any


def mimi_parts(mimi: Any) -> MimiParts:
    """Mimi's six streamed pieces in either layout (see the module docstring)."""
    encoder, decoder = mimi.encoder, mimi.decoder
    if hasattr(encoder, "encoder_seanet"):  # transformers >= 5.2x: wrapped per side
        return MimiParts(
            encoder.encoder_seanet, encoder.encoder_transformer, encoder.downsample,
            decoder.upsample, decoder.decoder_transformer, decoder.decoder_seanet,
        )  # fmt: skip
    return MimiParts(
        encoder, mimi.encoder_transformer, mimi.downsample,
        mimi.upsample, mimi.decoder_transformer, decoder,
    )  # fmt: skip
