"""A plain rollout of the tiny causal Wan, with no cache at all, for the equivalence tests.

Each chunk runs the stock ``WanTransformer3DModel`` modules over the WHOLE
clean history (t=0) followed by the noisy chunk, under a block-causal mask:
a frame sees the rollout's sink frames, the window of frames just before its
own chunk, and its own chunk. RoPE is the stock table over the full sequence,
self-attention the stock ``WanAttnProcessor`` given that mask, cross-attention
the stock processor over the prompt. Nothing is cached between passes or
chunks: every chunk recomputes every history frame from its latents.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from diffusers.models.transformers.transformer_wan import WanAttnProcessor
from torch import Tensor

from livegen.models.causalwan import controls
from livegen.models.causalwan.model import CausalWan, noise_seed


class _Masked:
    """The stock processor, handed a mask the stock block does not pass."""

    def __init__(self, mask: list[Tensor]) -> None:
        self.mask = mask
        self.stock = WanAttnProcessor()

    def __call__(
        self, attn: Any, hidden: Tensor, enc: Any = None, mask: Any = None, rotary: Any = None
    ) -> Tensor:
        return self.stock(attn, hidden, None, self.mask[0], rotary)  # type: ignore[no-any-return]


class Reference:
    def __init__(self, model: CausalWan) -> None:
        self.model = model
        self.tr = copy.deepcopy(model.transformer)
        self.mask: list[Tensor] = [torch.zeros(0)]
        for block in self.tr.blocks:
            block.attn1.set_processor(_Masked(self.mask))
            block.attn2.set_processor(WanAttnProcessor())

    def visible(self, num_frames: int) -> Tensor:
        """(frames, frames): frame i may attend to frame j (block-causal, sink plus window)."""
        c = self.model.config
        per, sink, window = c.latent_frames_per_chunk, c.sink_frames, c.window_frames
        seen = torch.zeros(num_frames, num_frames, dtype=torch.bool)
        for i in range(num_frames):
            start = i // per * per
            for j in range(num_frames):
                same = start <= j < start + per
                seen[i, j] = same or (j < start and (j < sink or j >= start - window))
        return seen

    def flow(self, x: Tensor, times: Tensor, cond: Tensor, text: Tensor) -> Tensor:
        tr, m = self.tr, self.model
        _, _, frames, height, width = x.shape
        tokens = m.tokens_per_frame
        seen = self.visible(frames).repeat_interleave(tokens, 0).repeat_interleave(tokens, 1)
        self.mask[0] = seen[None, None]
        rotary = tr.rope(x)
        hidden = tr.patch_embedding(x).flatten(2).transpose(1, 2)
        emb = tr.condition_embedder
        temb = emb.time_embedder(emb.timesteps_proj(times)) + m.control_embedding(cond)
        temb = temb.repeat_interleave(tokens, 0)[None]
        proj = emb.time_proj(emb.act_fn(temb)).unflatten(2, (6, -1))
        text = emb.text_embedder(text)
        for block in tr.blocks:
            hidden = block(hidden, text, proj, rotary)
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
