"""``livegen bench world-model --model causal-wan-tiny``: what the KV cache buys, and what a session costs.

Figures:

- ms per chunk, cached: the model's batched ``step`` on the runtime's KV pool
  (few denoising passes over the chunk's tokens reading the cached context,
  one clean pass writing it, the VAE decode), steady state once the window is
  full; median over chunks, one session;
- the same two at a size up ("small": 16x16 latents, 4 layers of 4 heads x 32,
  the 1.3B serving context of 3 sink + 9 window frames), since the tiny model
  is all overhead; each as the DiT alone (the part the
  cache changes) and with the VAE decode;
- ms per chunk, uncached, in the same run: what a server without the cache
  does, the stock ``WanTransformer3DModel.forward`` over the visible context
  frames (clean, t=0, per-token timesteps) plus the noisy chunk on every
  denoising pass, and the same VAE decode; and the ratio;
- bytes per session at the real Wan 2.1 1.3B geometry (832x480, bf16, sink 3 +
  window 9 + 3 latent frames a chunk): KV pages, the prompt's cross-attention
  K/V and the VAE decoder cache, by arithmetic, then checked against the
  allocator: the pool's admission for that spec, and the KV storage that
  ``CausalWan.new_kv_storage`` allocates (on the meta device: shapes, no memory).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from livegen.models.world import Tick, TickMeta
from livegen.runtime.world.kv_pool import Pool

GIB = 1024**3


def _tick(pool: Pool, chunk: int, prompt: str) -> Tick:
    context, write = pool.plan("bench", chunk)
    return Tick(TickMeta("bench", f"bench-{chunk}", chunk, ()), 7, prompt, {}, context, write)


def cached_ms(model: Any, chunks: int) -> tuple[list[float], list[float]]:
    """Per chunk: the whole step, and its DiT share (denoising and clean passes, no VAE)."""
    pool = Pool.for_spec(model.spec, 256 * 1024 * 1024)
    storage = model.new_kv_storage(pool.num_pages)
    pool.admit("bench")
    total, dit = [], []
    generate = model._generate

    def timed(jobs: Any) -> None:
        begun = time.perf_counter()
        generate(jobs)
        dit.append(1000 * (time.perf_counter() - begun))

    model._generate = timed  # instrumentation for this bench only
    try:
        for chunk in range(chunks):
            tick = _tick(pool, chunk, "a forest")
            start = time.perf_counter()
            model.step([tick], storage)
            total.append(1000 * (time.perf_counter() - start))
            pool.commit("bench")
    finally:
        del model._generate
        model.release("bench")
    return total, dit


def uncached_ms(model: Any, chunks: int) -> tuple[list[float], list[float]]:
    """The same rollout without a cache: the stock forward over context plus chunk on every pass."""
    import copy

    from diffusers.models.transformers.transformer_wan import WanAttnProcessor

    from livegen.models.causalwan.vae import DecoderState, decode_chunk

    stock = copy.deepcopy(model.transformer)
    for block in stock.blocks:
        block.attn1.set_processor(WanAttnProcessor())
        block.attn2.set_processor(WanAttnProcessor())
    c = model.config
    text = model.encode_text("a forest").to(model.dtype)
    tokens = model.tokens_per_frame
    history: list[torch.Tensor] = []
    state, total, dit = DecoderState(), [], []
    gen = torch.Generator().manual_seed(7)
    with torch.inference_mode():
        for _ in range(chunks):
            start = time.perf_counter()
            shape = (1, c.in_channels, c.latent_frames_per_chunk, c.latent_height, c.latent_width)
            x = torch.randn(shape, generator=gen).to(model.dtype)
            context = history[: c.sink_frames] + history[c.sink_frames :][-c.window_frames :]
            for i, sigma in enumerate(model.sigmas):
                full = torch.cat([*context, x], dim=2)
                times = [0.0] * len(context) * tokens + [sigma * 1000.0] * c.latent_frames_per_chunk * tokens
                flow = stock(full, torch.tensor([times]), text, return_dict=False)[0]
                x0 = x - sigma * flow[:, :, len(context) :]
                if i + 1 < len(model.sigmas):
                    nxt = model.sigmas[i + 1]
                    x = (1 - nxt) * x0 + nxt * torch.randn(shape, generator=gen).to(x0)
            dit.append(1000 * (time.perf_counter() - start))
            _, state = decode_chunk(model.vae, x0, state)
            history.extend(x0.split(1, dim=2))
            total.append(1000 * (time.perf_counter() - start))
    return total, dit


def real_geometry() -> dict[str, Any]:
    """Bytes per session of causal Wan 2.1 1.3B at 832x480 in bf16, by arithmetic and by allocation."""
    from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanTransformer3DModel

    from livegen.models.causalwan.config import CausalWanConfig
    from livegen.models.causalwan.model import CausalWan
    from livegen.models.causalwan.vae import state_bytes

    layers, heads, head_dim, tokens, text_len = 30, 12, 128, 30 * 52, 512
    page = layers * 2 * tokens * heads * head_dim * 2
    pages = 3 + 9 + 3
    cross = layers * 2 * text_len * heads * head_dim * 2
    with torch.device("meta"):
        transformer = WanTransformer3DModel(
            num_attention_heads=heads, attention_head_dim=head_dim, ffn_dim=8960, num_layers=layers,
            text_dim=4096, freq_dim=256, in_channels=16, out_channels=16,
        ).to(torch.bfloat16)  # fmt: skip
        vae = AutoencoderKLWan()  # its defaults are Wan 2.1's VAE
    decoder = state_bytes(vae, 60, 104, torch.bfloat16)
    config = CausalWanConfig(keys=(), decoder_state_bytes=decoder)
    model = CausalWan(
        "causal-wan", config, transformer, vae, lambda p: torch.zeros(0), FlowMatchEulerDiscreteScheduler()
    )
    spec = model.spec
    assert spec.kv is not None
    budget = 80 * GIB
    pool = Pool.for_spec(spec, budget)
    storage = model.new_kv_storage(pool.num_pages)
    per_session = pages * page + cross + decoder
    checks = {
        "page_bytes": spec.kv.page_bytes == page,
        "state_bytes": spec.state_bytes_per_session == cross + decoder,
        "pool_capacity_at_80GiB": pool.capacity == budget // per_session,
        "allocated_kv_bytes": storage.numel() * storage.element_size() == pool.num_pages * page,
    }
    return {
        "geometry": f"{layers} layers x {heads} heads x {head_dim}, {tokens} tokens per latent frame, bf16",
        "kv_page_bytes": page,
        "kv_pages_per_session": pages,
        "kv_bytes_per_session": pages * page,
        "cross_attention_bytes_per_session": cross,
        "vae_decoder_cache_bytes_per_session": decoder,
        "total_gib_per_session": round(per_session / GIB, 3),
        "sessions_in_80GiB": pool.capacity,
        "allocator_agrees": checks,
    }


def figures(model: Any, chunks: int) -> dict[str, Any]:
    """Cached against uncached, one session, once the window is full; the DiT alone and with the VAE."""
    steady = max(1, (model.config.sink_frames + model.config.window_frames) // 3 + 1)
    total, dit = (statistics.median(run[steady:]) for run in cached_ms(model, chunks))
    total_u, dit_u = (statistics.median(run[steady:]) for run in uncached_ms(model, chunks))
    return {
        "latents": f"{model.config.latent_height}x{model.config.latent_width}",
        "tokens_per_frame": model.tokens_per_frame,
        "layers_heads_head_dim": [model.num_layers, model.num_heads, model.head_dim],
        "context_frames": model.config.sink_frames + model.config.window_frames,
        "chunks_timed": chunks - steady,
        "dit_ms_per_chunk": {"cached": round(dit, 2), "uncached": round(dit_u, 2)},
        "dit_uncached_over_cached": round(dit_u / dit, 2),
        "with_vae_ms_per_chunk": {"cached": round(total, 2), "uncached": round(total_u, 2)},
    }


def run(model: Any, chunks: int) -> dict[str, Any]:
    from livegen.models.causalwan.loader import build_tiny

    # The same classes a size up (64 tokens a frame, 4 layers of 4 x 32) with the real model's
    # context (sink 3 + window 9 latent frames): where the cache starts to pay.
    small = build_tiny(latent_size=16, num_layers=4, num_heads=4, head_dim=32, window=(3, 9))
    return {
        "model": model.name,
        "tiny": figures(model, chunks),
        "small": figures(small, chunks),
        "real_1_3b_geometry": real_geometry(),
    }
