"""Attention processors for causal Wan: cached context K/V, chunk K/V written by the clean pass.

The stock ``WanTransformerBlock`` calls ``attn1(x, None, None, rotary_emb)``
and ``attn2(x, text, None, None)``; these processors replace the stock ones
per layer and read what the current forward needs from one shared ``Pass``:

- self-attention: queries of the chunk's tokens attend to the session's
  context (sink frames, then the window) and to the chunk itself,
  bidirectionally (block-causal). Rows of a batch have different context
  lengths: contexts are left-padded and masked. Only when ``Pass.collect`` is
  set (the final clean pass at t=0) does a layer hand its chunk K/V back, to
  be written to the session's pages: the denoising passes leave the cache as
  it was, so a failed or abandoned chunk does too.
- cross-attention: the prompt's K/V, computed once per prompt and cached
  (``Pass.text``), instead of projecting the text again on every pass.

RoPE positions are re-indexed, not absolute: keys are cached *before*
rotation, and each chunk rotates its context's keys at the slots they hold
now (the sink frames at 0.., the window right after them) and its own frames
after those (``context_positions``, ``Pass.context`` rotated once per chunk
by the model). So a frame's position is where it sits in what the chunk sees,
at most sink + window + chunk - 1 however long the session runs, within the
range the checkpoint was trained on (``CausalWanConfig.trained_frames``), as
the training-free long-horizon methods do (rolling sink, RoPE reset). Until
the window first slides the positions equal the absolute ones. The height and
width axes use the stock table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from diffusers.models.embeddings import get_1d_rotary_pos_embed
from torch import Tensor

#: Per layer, K and V shaped (batch, tokens, heads, head_dim).
LayerKV = tuple[Tensor, Tensor]


@dataclass
class Pass:
    """What one forward's processors read (and, on the clean pass, write)."""

    #: Per layer, the batch's context K/V, left-padded; None when no row has context.
    context: list[LayerKV] | None = None
    #: (batch, 1, 1, context + chunk tokens): which keys are real.
    mask: Tensor | None = None
    #: Per layer, the batch's prompt K/V.
    text: list[LayerKV] = field(default_factory=list)
    #: Set on the clean pass: per layer, the chunk's K/V, K before RoPE (a page is rotated when read).
    collect: list[LayerKV] | None = None


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Wan's RoPE on interleaved pairs, as the stock processor applies it."""
    x1, x2 = x.reshape(*x.shape[:-1], -1, 2).unbind(-1)
    cos, sin = cos[..., 0::2], sin[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out.type_as(x)


def _heads(attn: Any, x: Tensor) -> Tensor:
    return x.reshape(*x.shape[:2], attn.heads, -1)


def _attend(attn: Any, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask)
    out = out.transpose(1, 2).flatten(2, 3).type_as(q)
    return attn.to_out[1](attn.to_out[0](out))  # type: ignore[no-any-return]


class CachedSelfAttention:
    """``attn1`` of one layer: the chunk's queries over cached context plus the chunk."""

    def __init__(self, layer: int, state: Pass) -> None:
        self.layer = layer
        self.state = state

    def __call__(
        self,
        attn: Any,
        hidden_states: Tensor,
        encoder_hidden_states: Tensor | None = None,
        attention_mask: Tensor | None = None,
        rotary_emb: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:
        q = _heads(attn, attn.norm_q(attn.to_q(hidden_states)))
        k = _heads(attn, attn.norm_k(attn.to_k(hidden_states)))
        v = _heads(attn, attn.to_v(hidden_states))
        state = self.state
        if state.collect is not None:
            state.collect.append((k, v))
        if rotary_emb is not None:
            q, k = _rotate(q, *rotary_emb), _rotate(k, *rotary_emb)
        if state.context is not None:
            ck, cv = state.context[self.layer]
            k, v = torch.cat([ck.to(k.dtype), k], 1), torch.cat([cv.to(v.dtype), v], 1)
        return _attend(attn, q, k, v, state.mask)


class CachedCrossAttention:
    """``attn2`` of one layer: the chunk's queries over the prompt's cached K/V."""

    def __init__(self, layer: int, state: Pass) -> None:
        self.layer = layer
        self.state = state

    def __call__(
        self,
        attn: Any,
        hidden_states: Tensor,
        encoder_hidden_states: Tensor | None = None,
        attention_mask: Tensor | None = None,
        rotary_emb: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:
        q = _heads(attn, attn.norm_q(attn.to_q(hidden_states)))
        k, v = self.state.text[self.layer]
        return _attend(attn, q, k.to(q.dtype), v.to(q.dtype), None)


def text_kv(attn: Any, text: Tensor) -> LayerKV:
    """A layer's cross-attention K/V of a projected prompt, as the stock processor computes them."""
    return _heads(attn, attn.norm_k(attn.to_k(text))), _heads(attn, attn.to_v(text))


def install(transformer: Any, state: Pass) -> None:
    """Swap every block's attention processors for the cached ones reading ``state``."""
    for index, block in enumerate(transformer.blocks):
        if block.attn2.add_k_proj is not None:
            raise NotImplementedError("image-conditioned (I2V) Wan checkpoints are not supported yet")
        block.attn1.set_processor(CachedSelfAttention(index, state))
        block.attn2.set_processor(CachedCrossAttention(index, state))


def rotate_keys(keys: Tensor, rotary: tuple[Tensor, Tensor]) -> Tensor:
    """Cached (un-rotated) keys (batch, tokens, heads, head_dim) rotated at a chunk's context slots."""
    return _rotate(keys, *rotary)


def context_positions(lengths: list[int], width: int, frames: int) -> tuple[Tensor, Tensor]:
    """Per batch row, the RoPE positions of its context frames, left-padded to ``width`` (padding
    is masked; it gets 0), and of its chunk's ``frames`` frames right after its own context."""
    context = [[max(0, slot - (width - n)) for slot in range(width)] for n in lengths]
    chunk = [[n + f for f in range(frames)] for n in lengths]
    return torch.tensor(context, dtype=torch.long), torch.tensor(chunk, dtype=torch.long)


def rope(transformer: Any, positions: Tensor, height: int, width: int) -> tuple[Tensor, Tensor]:
    """RoPE cos/sin for frames at ``positions`` (batch, frames): (batch, tokens, 1, head_dim)."""
    module = transformer.rope
    _, p_h, p_w = transformer.config.patch_size
    pph, ppw = height // p_h, width // p_w
    batch, frames = positions.shape
    split = [module.t_dim, module.h_dim, module.w_dim]
    _, cos_h, cos_w = module.freqs_cos.split(split, dim=1)
    _, sin_h, sin_w = module.freqs_sin.split(split, dim=1)
    pos = positions.flatten().to(torch.float64)
    cos_t, sin_t = get_1d_rotary_pos_embed(
        module.t_dim, pos, 10000.0, use_real=True, repeat_interleave_real=True, freqs_dtype=torch.float64
    )
    parts = []
    for t_part, h_part, w_part in ((cos_t, cos_h, cos_w), (sin_t, sin_h, sin_w)):
        t_grid = t_part.to(h_part.device).view(batch, frames, 1, 1, -1).expand(batch, frames, pph, ppw, -1)
        h_grid = h_part[:pph].view(1, 1, pph, 1, -1).expand(batch, frames, pph, ppw, -1)
        w_grid = w_part[:ppw].view(1, 1, 1, ppw, -1).expand(batch, frames, pph, ppw, -1)
        grid = torch.cat([t_grid, h_grid, w_grid], dim=-1)
        parts.append(grid.reshape(batch, frames * pph * ppw, 1, -1))
    return parts[0], parts[1]
