"""Building causal Wan: the tiny random configuration, or weights from a local directory.

``causal-wan-tiny`` is the same code on a tiny configuration of the same
classes, randomly initialised from a fixed seed (2 layers, 2 heads of 12,
8x8 latents of 4 channels, a VAE of base width 8, a one-layer umT5 over
UTF-8 bytes), so the whole path serves and tests without weights. Its frames
are 64x64 and mean nothing.

``causal-wan`` loads a Wan 2.1 diffusers directory (``weights.py``). Nothing
here reaches a model hub: the user brings the weights.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from livegen.models.causalwan.config import CausalWanConfig
from livegen.models.causalwan.controls import ControlEmbedding
from livegen.models.causalwan.model import CausalWan
from livegen.models.causalwan.vae import state_bytes

TINY_SEED = 17
TINY_TEXT_LEN = 16


def tiny_config(latent_size: int = 8, sink_frames: int = 1, window_frames: int = 3) -> CausalWanConfig:
    return CausalWanConfig(
        latent_height=latent_size,
        latent_width=latent_size,
        in_channels=4,
        sink_frames=sink_frames,
        window_frames=window_frames,
        text_len=TINY_TEXT_LEN,
        description="causal Wan 2.1 architecture, tiny and randomly initialised (64x64, meaningless "
        "frames): try the whole path without weights; keys, mouse and camera steer it in a fixed random way",
    )


def byte_tokens(prompt: str, length: int) -> tuple[Tensor, Tensor]:
    """The tiny model's tokenizer: UTF-8 bytes (+2), then end-of-sequence (1), padded with 0."""
    ids = [*(b + 2 for b in prompt.encode()[: length - 1]), 1]
    mask = [1] * len(ids) + [0] * (length - len(ids))
    return torch.tensor([ids + [0] * (length - len(ids))]), torch.tensor([mask])


def text_encoder_fn(
    encoder: Any, tokenize: Callable[[str], tuple[Tensor, Tensor]]
) -> Callable[[str], Tensor]:
    """prompt -> (1, text_len, dim) embeddings, zero past the prompt's tokens, as the Wan pipeline pads."""

    def encode(prompt: str) -> Tensor:
        ids, mask = tokenize(prompt)
        device = next(encoder.parameters()).device
        with torch.inference_mode():
            hidden = encoder(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
        embeds: Tensor = hidden * mask.to(hidden)[..., None]
        return embeds

    return encode


def build_tiny(
    latent_size: int = 8,
    num_layers: int = 2,
    num_heads: int = 2,
    head_dim: int = 12,
    window: tuple[int, int] = (1, 3),
) -> CausalWan:
    """The tiny configuration (the defaults); larger sizes and (sink, window) for benches."""
    from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    config = tiny_config(latent_size, *window)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        transformer = WanTransformer3DModel(
            num_attention_heads=num_heads,
            attention_head_dim=head_dim,
            in_channels=config.in_channels,
            out_channels=config.in_channels,
            text_dim=16,
            freq_dim=16,
            ffn_dim=32 if head_dim == 12 else 4 * num_heads * head_dim,
            num_layers=num_layers,
            rope_max_seq_len=64,
        )
        vae = AutoencoderKLWan(
            base_dim=8,
            z_dim=config.in_channels,
            dim_mult=[1, 1, 1, 1],
            num_res_blocks=1,
            attn_scales=[],
            temperal_downsample=[False, True, True],
            latents_mean=[0.0] * config.in_channels,
            latents_std=[1.0] * config.in_channels,
        )
        umt5 = UMT5Config(
            vocab_size=258, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2,
            relative_attention_num_buckets=8, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
        )  # fmt: skip
        encoder = UMT5EncoderModel(umt5)
        controls = ControlEmbedding(len(config.keys), num_heads * head_dim)
    for module in (transformer, vae, encoder, controls):
        module.eval()
    config = _with_decoder_bytes(config, vae)
    encode = text_encoder_fn(encoder, lambda prompt: byte_tokens(prompt, TINY_TEXT_LEN))
    scheduler = FlowMatchEulerDiscreteScheduler(shift=config.shift)
    return CausalWan("causal-wan-tiny", config, transformer, vae, encode, scheduler, controls)


def _with_decoder_bytes(config: CausalWanConfig, vae: Any) -> CausalWanConfig:
    from dataclasses import replace

    dtype = next(vae.parameters()).dtype
    return replace(
        config, decoder_state_bytes=state_bytes(vae, config.latent_height, config.latent_width, dtype)
    )


def load_tiny() -> CausalWan:
    """The registry's loader for ``causal-wan-tiny``: built from the fixed seed, on one CPU thread."""
    torch.set_num_threads(1)
    model = build_tiny()
    model.warm_up()
    return model
