"""A plain rollout of the tiny causal Wan, with no cache at all, for the equivalence tests.

Each chunk runs the stock ``WanTransformer3DModel`` modules over the WHOLE
clean history (t=0) followed by the noisy chunk, block-causally: a frame sees
the rollout's sink frames, the window of frames just before its own chunk,
and its own chunk. RoPE is re-indexed per view, as served: each chunk's
queries attend over their view (sink, window, chunk) laid out as one
contiguous clip, rotated by the stock table of a clip that long (positions
0..n-1, the chunk last), so a frame's position is its slot in the view of the
chunk that reads it. Cross-attention is the stock processor over the prompt.
Nothing is cached between passes or chunks: every chunk recomputes every
history frame from its latents.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from diffusers.models.transformers.transformer_wan import WanAttnProcessor
from torch import Tensor

from livegen.models.causalwan import controls
from livegen.models.causalwan.model import CausalWan, noise_seed


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """The stock processor's RoPE on interleaved pairs."""
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos[..., 0::2] - x2 * sin[..., 1::2]
    out[..., 1::2] = x1 * sin[..., 1::2] + x2 * cos[..., 0::2]
    return out


class _Views:
    """Self-attention of the whole sequence, each chunk's queries over their own view."""

    def __init__(self, reference: Reference) -> None:
        self.reference = reference

    def __call__(
        self, attn: Any, hidden: Tensor, enc: Any = None, mask: Any = None, rotary: Any = None
    ) -> Tensor:
        q = attn.norm_q(attn.to_q(hidden)).unflatten(2, (attn.heads, -1))
        k = attn.norm_k(attn.to_k(hidden)).unflatten(2, (attn.heads, -1))
        v = attn.to_v(hidden).unflatten(2, (attn.heads, -1))
        tokens = self.reference.model.tokens_per_frame
        out = torch.empty_like(q)
        for chunk, view in self.reference.views(hidden.shape[1] // tokens):
            seen = torch.tensor([f * tokens + t for f in view for t in range(tokens)])
            mine = torch.tensor([f * tokens + t for f in chunk for t in range(tokens)])
            cos, sin = self.reference.table(len(view))
            qc = _rotate(q[:, mine], cos[:, -len(mine) :], sin[:, -len(mine) :])
            kc = _rotate(k[:, seen], cos, sin)
            qc, kc, vc = (t.transpose(1, 2) for t in (qc, kc, v[:, seen]))
            out[:, mine] = F.scaled_dot_product_attention(qc, kc, vc).transpose(1, 2)
        return attn.to_out[1](attn.to_out[0](out.flatten(2, 3)))  # type: ignore[no-any-return]


class Reference:
    def __init__(self, model: CausalWan) -> None:
        self.model = model
        self.tr = copy.deepcopy(model.transformer)
        for block in self.tr.blocks:
            block.attn1.set_processor(_Views(self))
            block.attn2.set_processor(WanAttnProcessor())

    def views(self, num_frames: int) -> list[tuple[list[int], list[int]]]:
        """Per chunk: its frames, and the frames it sees in slot order (sinks, window, itself)."""
        c = self.model.config
        per, sink, window = c.latent_frames_per_chunk, c.sink_frames, c.window_frames
        out = []
        for start in range(0, num_frames, per):
            chunk = list(range(start, start + per))
            past = [j for j in range(start) if j < sink or j >= start - window]
            out.append((chunk, past + chunk))
        return out

    def table(self, num_frames: int) -> tuple[Tensor, Tensor]:
        """The stock RoPE table of a clip of ``num_frames`` latent frames."""
        c = self.model.config
        return self.tr.rope(torch.zeros(1, c.in_channels, num_frames, c.latent_height, c.latent_width))  # type: ignore[no-any-return]

    def flow(self, x: Tensor, times: Tensor, cond: Tensor, text: Tensor) -> Tensor:
        tr, m = self.tr, self.model
        _, _, frames, height, width = x.shape
        tokens = m.tokens_per_frame
        hidden = tr.patch_embedding(x).flatten(2).transpose(1, 2)
        emb = tr.condition_embedder
        temb = emb.time_embedder(emb.timesteps_proj(times)) + m.control_embedding(cond)
        temb = temb.repeat_interleave(tokens, 0)[None]
        proj = emb.time_proj(emb.act_fn(temb)).unflatten(2, (6, -1))
        text = emb.text_embedder(text)
        for block in tr.blocks:
            hidden = block(hidden, text, proj, None)
        shift, scale = (tr.scale_shift_table.unsqueeze(0) + temb.unsqueeze(2)).chunk(2, dim=2)
        hidden = tr.norm_out(hidden) * (1 + scale.squeeze(2)) + shift.squeeze(2)
        hidden = tr.proj_out(hidden).reshape(1, frames, height // 2, width // 2, 1, 2, 2, -1)
        return hidden.permute(0, 7, 1, 4, 2, 5, 3, 6).flatten(6, 7).flatten(4, 5).flatten(2, 3)

    @torch.inference_mode()
    def rollout(self, seed: int, prompt: str, chunk_controls: Sequence[Mapping[str, Any]]) -> list[Tensor]:
        """Clean latents (C, frames, H, W) of each chunk."""
        m, c = self.model, self.model.config
        text = m.encode_text(prompt)
        history: list[Tensor] = []
        conds: list[Tensor] = []
        for index, chunk_controls_ in enumerate(chunk_controls):
            frames = c.latent_frames_per_chunk
            shape = (c.in_channels, frames, c.latent_height, c.latent_width)
            gen = torch.Generator().manual_seed(noise_seed(seed, index))
            x = torch.randn(shape, generator=gen)
            cond = torch.cat([*conds, controls.encode(chunk_controls_, c.keys, frames)])
            past = sum(h.shape[1] for h in history)
            for i, sigma in enumerate(m.sigmas):
                times = torch.tensor([0.0] * past + [sigma * 1000.0] * frames)
                full = torch.cat([*history, x], dim=1)[None]
                x0 = x - sigma * self.flow(full, times, cond, text)[0, :, past:]
                if i + 1 < len(m.sigmas):
                    x = (1 - m.sigmas[i + 1]) * x0 + m.sigmas[i + 1] * torch.randn(shape, generator=gen)
            history.append(x0)
            conds.append(cond[past:])
        return history

    @torch.inference_mode()
    def frames(self, latents: Sequence[Tensor]) -> Tensor:
        """The rollout decoded in one call by the stock VAE: uint8 (frames, H, W, 3)."""
        vae = self.model.vae
        z = torch.cat(list(latents), dim=1)[None]
        mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1)
        std = torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
        video = vae.decode(z * std + mean).sample[0]
        return ((video.permute(1, 2, 3, 0) + 1) * 127.5).round().clamp(0, 255).to(torch.uint8)
