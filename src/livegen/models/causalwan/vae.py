"""The Wan VAE's causal decoder, one chunk at a time, its state kept per session.

``AutoencoderKLWan.decode`` decodes a whole clip in one call, frame by frame,
through a list of causal-convolution caches (``_feat_map``) it keeps on the
module and clears per call. A session decodes its rollout a chunk at a time,
so here that list lives in the session instead (``DecoderState``), and chunk
0 alone gets the first-frame treatment (``first_chunk``): the frames equal
those of decoding the whole rollout in one call. The decoder replaces cache
entries rather than writing into them, so a chunk decodes into a shallow copy
of the state and the session keeps the copy only when the chunk commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass
class DecoderState:
    """A session's causal-conv caches; empty before its first chunk."""

    caches: list[Any] | None = None

    def nbytes(self) -> int:
        return sum(c.numel() * c.element_size() for c in self.caches or () if isinstance(c, Tensor))


def denormalize(vae: Any, latents: Tensor) -> Tensor:
    """Model latents -> the VAE's latent space, as the Wan pipeline does before decoding."""
    mean = torch.tensor(vae.config.latents_mean, dtype=latents.dtype, device=latents.device)
    std = torch.tensor(vae.config.latents_std, dtype=latents.dtype, device=latents.device)
    return latents * std.view(1, -1, 1, 1, 1) + mean.view(1, -1, 1, 1, 1)


def decode_chunk(vae: Any, latents: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
    """Decode (1, C, F, H, W) latents after ``state``: frames in [-1, 1], and the state after them."""
    is_first = state.caches is None
    num_convs = vae._cached_conv_counts["decoder"]
    caches: list[Any] = [None] * num_convs if state.caches is None else list(state.caches)
    x = vae.post_quant_conv(denormalize(vae, latents).to(vae.dtype))
    outs = []
    for i in range(x.shape[2]):
        outs.append(
            vae.decoder(x[:, :, i : i + 1], feat_cache=caches, feat_idx=[0], first_chunk=is_first and i == 0)
        )
    out = torch.cat(outs, 2)
    if vae.config.patch_size is not None:
        from diffusers.models.autoencoders.autoencoder_kl_wan import unpatchify

        out = unpatchify(out, patch_size=vae.config.patch_size)
    return out.clamp(-1.0, 1.0), DecoderState(caches)


def state_bytes(vae: Any, latent_height: int, latent_width: int, dtype: torch.dtype) -> int:
    """Bytes of one session's decoder state at this latent size, by a shape-only run on the meta device."""
    from diffusers import AutoencoderKLWan

    with torch.device("meta"):
        meta = AutoencoderKLWan.from_config(vae.config)
        meta = meta if dtype == torch.float32 else meta.to(dtype)
        latents = torch.zeros(1, vae.config.z_dim, 2, latent_height, latent_width, dtype=dtype)
        _, state = decode_chunk(meta, latents, DecoderState())
    return state.nbytes()
