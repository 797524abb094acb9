"""Mimi, streamed one 80 ms frame at a time, for many sessions at once, each with its own state.

The stock ``MimiModel`` streams its encoder's convolutions (``MimiConv1dPaddingCache``) for one
batch that starts and stops together, and decodes without any convolution state (each call starts
from silence). Serving sessions that join and leave between frames needs the state per session, so
this walks the stock modules (same weights, same maths) and keeps, per slot, in pools allocated on
first use and never grown:

- each causal ``MimiConv1d``: its last ``padding_total`` input samples (zeros at start; the
  ``replicate`` downsampler repeats a session's first sample, as the stock cache does);
- each ``MimiConvTranspose1d``: the overlap its last frame leaves for the next (overlap-add);
- the encoder and decoder transformers: a per-slot ring KV cache (``cache.RingKV``) over Mimi's
  sliding window, at each session's own positions.

A frame encoded here gives the codes the stock streaming encoder gives for the same audio; decoding
a run of frames gives the audio the stock decoder gives for the whole run.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from livegen.models.moshi.cache import RingKV
from livegen.models.moshi.compat import cache_keyword, mimi_parts, run_layers


class StreamingMimi:
    """Per-slot streaming encode and decode over a stock ``MimiModel``."""

    def __init__(self, mimi: Any, slots: int, num_codebooks: int) -> None:
        from transformers.models.mimi.modeling_mimi import MimiConv1d, MimiConvTranspose1d, MimiResnetBlock

        self._conv, self._convtr, self._resnet = MimiConv1d, MimiConvTranspose1d, MimiResnetBlock
        self.mimi = mimi
        self.parts = mimi_parts(mimi)
        self._keyword = cache_keyword(self.parts.encoder_transformer.layers[0])
        self.slots = slots
        self.num_codebooks = num_codebooks
        config = mimi.config
        param = next(mimi.parameters())
        self.dtype, self.device = param.dtype, param.device
        #: Encoder-transformer steps per frame (25 Hz inside, 12.5 Hz codes: 2).
        chunk = int(config.encodec_frame_rate // config.frame_rate)

        def ring() -> RingKV:
            return RingKV(
                layers=config.num_hidden_layers,
                slots=slots,
                kv_heads=config.num_key_value_heads,
                head_dim=config.head_dim,
                window=config.sliding_window,
                chunk=chunk,
                dtype=self.dtype,
                device=self.device,
            )

        self.encoder_kv, self.decoder_kv = ring(), ring()
        self._states: dict[str, Tensor] = {}
        self._fresh = torch.ones(slots, dtype=torch.bool, device=self.device)
        self._names = {id(module): name for name, module in mimi.named_modules()}

    def reset(self, slot: int) -> None:
        self.encoder_kv.reset(slot)
        self.decoder_kv.reset(slot)
        for state in self._states.values():
            state[slot].zero_()
        self._fresh[slot] = True

    def nbytes(self) -> int:
        states = sum(t.numel() * t.element_size() for t in self._states.values())
        return states + self.encoder_kv.nbytes() + self.decoder_kv.nbytes()

    # -- the two directions -------------------------------------------------------------------
    def encode(self, audio: Tensor, rows: Tensor) -> Tensor:
        """(B, 1, frame) float audio -> (B, num_codebooks) codes of this frame."""
        parts = self.parts
        hidden = self._walk(parts.encoder_seanet.layers, audio.to(self.dtype), rows)
        hidden = self._transformer(parts.encoder_transformer, hidden, self.encoder_kv, rows)
        latents = self._conv1d(parts.downsample, hidden, rows)
        self._fresh[rows] = False
        codes: Tensor = self.mimi.quantizer.encode(latents, self.num_codebooks).transpose(0, 1)
        return codes[:, :, -1]

    def decode(self, codes: Tensor, rows: Tensor) -> Tensor:
        """(B, num_codebooks) codes of one frame -> (B, 1, frame) float audio."""
        parts = self.parts
        latents = self.mimi.quantizer.decode(codes[:, :, None])
        hidden = self._convtr1d(parts.upsample, latents.to(self.dtype), rows)
        hidden = self._transformer(parts.decoder_transformer, hidden, self.decoder_kv, rows)
        audio: Tensor = self._walk(parts.decoder_seanet.layers, hidden, rows)
        return audio

    # -- the streaming pieces -------------------------------------------------------------------
    def _walk(self, layers: nn.ModuleList, hidden: Tensor, rows: Tensor) -> Tensor:
        for layer in layers:
            if isinstance(layer, self._conv):
                hidden = self._conv1d(layer, hidden, rows)
            elif isinstance(layer, self._convtr):
                hidden = self._convtr1d(layer, hidden, rows)
            elif isinstance(layer, self._resnet):
                residual = hidden
                hidden = self._walk(layer.block, hidden, rows)
                shortcut = layer.shortcut
                skip = (
                    self._conv1d(shortcut, residual, rows) if isinstance(shortcut, self._conv) else residual
                )
                hidden = skip + hidden
            else:
                hidden = layer(hidden)
        return hidden

    def _state(self, module: nn.Module, channels: int, length: int) -> Tensor:
        name = self._names[id(module)]
        if name not in self._states:
            shape = (self.slots, channels, length)
            self._states[name] = torch.zeros(shape, dtype=self.dtype, device=self.device)
        return self._states[name]

    def _conv1d(self, module: Any, hidden: Tensor, rows: Tensor) -> Tensor:
        pad = int(module.padding_total)
        if pad == 0:
            return module.conv(hidden)  # type: ignore[no-any-return]
        state = self._state(module, hidden.shape[1], pad)
        previous = state[rows]
        if module.pad_mode == "replicate":
            first = hidden[..., :1].expand_as(previous)
            previous = torch.where(self._fresh[rows][:, None, None], first, previous)
        full = torch.cat([previous, hidden], dim=-1)
        state[rows] = full[..., -pad:]
        return module.conv(full)  # type: ignore[no-any-return]

    def _convtr1d(self, module: Any, hidden: Tensor, rows: Tensor) -> Tensor:
        conv = module.conv
        overlap = conv.kernel_size[0] - conv.stride[0]
        out = conv(hidden)
        if overlap == 0:
            return out  # type: ignore[no-any-return]
        state = self._state(module, out.shape[1], overlap)
        out[..., :overlap] += state[rows]
        bias = conv.bias[None, :, None] if conv.bias is not None else 0.0
        state[rows] = out[..., -overlap:] - bias
        return out[..., :-overlap]  # type: ignore[no-any-return]

    def _transformer(self, transformer: Any, hidden: Tensor, pool: RingKV, rows: Tensor) -> Tensor:
        states = hidden.transpose(1, 2)
        step = pool.begin(rows, states.shape[1])
        embeddings = transformer.rotary_emb(states, step.positions)
        states = run_layers(
            transformer.layers, states, self._keyword, step, attention_mask=step.mask,
            position_embeddings=embeddings,
        )  # fmt: skip
        return states.transpose(1, 2)
