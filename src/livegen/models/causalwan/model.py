"""``causal-wan``: one batched step generates a chunk of latent frames for every due session.

Per step, for each group of ticks with the same number of latent frames:
gather each session's context K/V (from the runtime's pool pages when it
passes ``kv_storage``, else from pages the model keeps per session), then run
the few-step flow-matching loop of Self-Forcing (``sigmas`` through the stock
``FlowMatchEulerDiscreteScheduler`` with its shift; each step predicts x0 and
re-noises it to the next sigma with fresh noise), then one clean pass at t=0
whose chunk K/V become the session's new pages (``attention.py``), then the
VAE decodes the chunk after the session's causal decoder state (``vae.py``).

A session created with a seed image starts chunk 0 from it: the VAE
encodes the image as one latent frame, which stays chunk 0's first latent
frame, clean, through every denoising step (``_pin``); its decoded frame is
the VAE's reconstruction of the image.

Nothing of a session changes until its whole chunk succeeded: pages, decoder
state and prompt cache are staged and assigned at the end, so
a failed chunk leaves the session as it was. Chunk 0 starts a session afresh;
a later chunk of a session the model no longer holds raises ``StateEvicted``.
RoPE positions are re-indexed per chunk (``attention.py``): a chunk's frames
sit right after its context, so no position grows with the session, and
nothing else of a session does either (pages: sink + window; the decoder
cache: fixed-size; prompts: ``PROMPT_CACHE_SIZE``).
Noise comes from generators seeded by (seed, chunk index), so a seed, prompt
and controls always give the same frames.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from livegen.errors import ConfigError, ModelContractError, StateEvicted
from livegen.models.causalwan import attention, controls
from livegen.models.causalwan.attention import LayerKV, Pass
from livegen.models.causalwan.config import CausalWanConfig
from livegen.models.causalwan.vae import DecoderState, decode_chunk
from livegen.models.world import Chunk, KVGeometry, PromptBlend, Tick, TickMeta, WorldSpec

#: Prompts whose cross-attention K/V are kept, shared by the sessions that use them.
PROMPT_CACHE_SIZE = 16


#: What a session's cross-attention K/V were made from: the prompt, and the blend of a transition.
TextKey = tuple[str, PromptBlend | None]


@dataclass
class _Session:
    text_key: TextKey
    text: list[LayerKV]
    decoder: DecoderState
    #: Per frame (layers, 2, tokens, heads, head_dim) when the runtime passes no pool.
    pages: list[Tensor] = field(default_factory=list)


@dataclass
class _Job:
    tick: Tick
    session: _Session | None
    text: list[LayerKV]
    context: list[Tensor]  # per frame (layers, 2, tokens, heads, head_dim), K before RoPE
    latents: Tensor | None = None
    kv: Tensor | None = None  # (frames, layers, 2, tokens, heads, head_dim)
    #: Chunk 0 of a session with a seed image: the image's latent frame, (C, 1, h, w).
    seed_latent: Tensor | None = None


class CausalWan:
    """The causal Wan world model (see module docstring); safe for one caller at a time."""

    def __init__(
        self,
        name: str,
        config: CausalWanConfig,
        transformer: Any,
        vae: Any,
        encode_text: Callable[[str], Tensor],
        scheduler: Any,
        control_embedding: controls.ControlEmbedding | None = None,
    ) -> None:
        if config.positions_used > config.trained_frames:
            raise ConfigError(
                f"sink {config.sink_frames} + window {config.window_frames} + a chunk's latent frames need "
                f"{config.positions_used} RoPE positions; the checkpoint knows {config.trained_frames} "
                "(trained_frames in livegen.json)"
            )
        self.name = name
        self.config = config
        self.transformer, self.vae, self.scheduler = transformer, vae, scheduler
        self.encode_text = encode_text
        self.control_embedding = control_embedding
        # The blocks' dtype: diffusers keeps a few modules float32 under a bfloat16 model.
        self.dtype = transformer.patch_embedding.weight.dtype
        self.device = transformer.patch_embedding.weight.device
        scheduler.set_timesteps(sigmas=list(config.sigmas), device="cpu")
        self.sigmas = [float(s) for s in scheduler.sigmas[: len(config.sigmas)]]
        self._pass = Pass()
        attention.install(transformer, self._pass)
        tc = transformer.config
        self.num_layers, self.num_heads, self.head_dim = (
            tc.num_layers,
            tc.num_attention_heads,
            tc.attention_head_dim,
        )
        self.tokens_per_frame = config.tokens_per_frame(tuple(tc.patch_size))
        self.spec = self._spec()
        self._sessions: dict[str, _Session] = {}
        self._prompts: OrderedDict[str, list[LayerKV]] = OrderedDict()
        #: Called with (request id, the chunk's clean latents) after each chunk; for tests and benches.
        self.on_latents: Callable[[str, Tensor], None] | None = None

    def _spec(self) -> WorldSpec:
        c = self.config
        kv = KVGeometry(
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            head_dim=self.head_dim,
            tokens_per_frame=self.tokens_per_frame,
            window_frames=c.window_frames,
            sink_frames=c.sink_frames,
            bytes_per_element=torch.finfo(self.dtype).bits // 8,
        )
        return WorldSpec(
            width=c.latent_width * c.spatial_factor,
            height=c.latent_height * c.spatial_factor,
            fps=c.fps,
            frames_per_chunk=c.temporal_factor * c.latent_frames_per_chunk,
            first_chunk_frames=1 + c.temporal_factor * (c.first_chunk_latent_frames - 1),
            latent_frames_per_chunk=c.latent_frames_per_chunk,
            first_chunk_latent_frames=c.first_chunk_latent_frames,
            controls=controls.tracks(c.keys) if self.control_embedding is not None else (),
            kv=kv,
            state_bytes_per_session=c.state_bytes_per_session(
                self.num_layers, self.num_heads, self.head_dim, kv.bytes_per_element
            ),
            description=c.description,
            accepts_seed_image=True,
        )

    # -- contract ---------------------------------------------------------------------------
    def new_kv_storage(self, num_pages: int) -> Tensor:
        shape = (num_pages, self.num_layers, 2, self.tokens_per_frame, self.num_heads, self.head_dim)
        return torch.zeros(shape, dtype=self.dtype, device=self.device)

    def release(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    @property
    def num_sessions(self) -> int:
        return len(self._sessions)

    def step(self, ticks: Sequence[Tick], kv_storage: Any) -> list[Chunk]:
        jobs = [self._start(tick, kv_storage) for tick in ticks]
        with torch.inference_mode():
            for group in _by_frames(jobs, self.spec):
                self._generate(group)
            decoded = [self._decode(job) for job in jobs]
        chunks = []
        for job, (frames, decoder) in zip(jobs, decoded, strict=True):
            self._commit(job, decoder, kv_storage)
            chunks.append(Chunk(meta=job.tick.meta, frames=frames))
        return chunks

    def warm_up(self) -> None:
        """Two throwaway chunks, so the first real session does not pay for first-call setup."""
        for chunk in range(2):
            meta = TickMeta("warm-up", "warm-up", chunk, ())
            self.step([Tick(meta=meta, seed=0, prompt="", controls={})], None)
        self.release("warm-up")

    # -- a chunk ----------------------------------------------------------------------------
    def _start(self, tick: Tick, kv_storage: Any) -> _Job:
        meta = tick.meta
        frames = self.spec.pages_in_chunk(meta.chunk_index)
        if kv_storage is not None and len(tick.write_pages) != frames:
            raise ModelContractError(
                f"tick for chunk {meta.chunk_index} names {len(tick.write_pages)} write pages, needs {frames}"
            )
        session = None if meta.chunk_index == 0 else self._sessions.get(meta.session_id)
        if meta.chunk_index > 0 and session is None:
            raise StateEvicted(f"no causal-wan state for session {meta.session_id}")
        key = (tick.prompt, tick.prompt_blend)
        text = session.text if session is not None and session.text_key == key else self.conditioning(tick)
        if session is None:
            context: list[Tensor] = []
        elif kv_storage is None:
            context = list(session.pages)
        else:
            context = [kv_storage[page] for page in tick.context_pages]
        job = _Job(tick=tick, session=session, text=text, context=context)
        if meta.chunk_index == 0 and tick.seed_image is not None:
            job.seed_latent = self.encode_image(tick.seed_image)
        return job

    def encode_image(self, image: np.ndarray) -> Tensor:
        """An RGB uint8 (H, W, 3) frame as one latent frame (C, 1, h, w), as the VAE encodes a clip's first.

        The mean of the encoder's distribution, normalised as the model's latents are.
        """
        pixels = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).float() / 127.5 - 1
        with torch.inference_mode():
            encoded = self.vae.encode(pixels[None, :, None].to(self.vae.device, self.vae.dtype))
            latent = encoded.latent_dist.mode().float()
            mean, std = (
                torch.tensor(getattr(self.vae.config, name), device=latent.device).view(1, -1, 1, 1, 1)
                for name in ("latents_mean", "latents_std")
            )
            normalised: Tensor = ((latent - mean) / std)[0].to(self.device, self.dtype)
        return normalised

    def conditioning(self, tick: Tick) -> list[LayerKV]:
        """The tick's cross-attention K/V per layer: its prompt's, or a transition's blend.

        A transition interpolates each layer's cached K and V linearly from the old prompt's to
        the new one's (``weight`` of the new), so every prompt is still encoded once and cached.
        """
        text = self._text(tick.prompt)
        blend = tick.prompt_blend
        if blend is None or blend.weight >= 1:
            return text
        old = self._text(blend.from_prompt)
        w = blend.weight
        with torch.inference_mode():
            pairs = zip(old, text, strict=True)
            return [(torch.lerp(ok, k, w), torch.lerp(ov, v, w)) for (ok, ov), (k, v) in pairs]

    def _text(self, prompt: str) -> list[LayerKV]:
        """The prompt's cross-attention K/V per layer, from the cache or computed once."""
        cached = self._prompts.get(prompt)
        if cached is not None:
            self._prompts.move_to_end(prompt)
            return cached
        with torch.inference_mode():
            embeds = self.encode_text(prompt).to(self.device, self.dtype)  # (1, text_len, text_dim)
            projected = self.transformer.condition_embedder.text_embedder(embeds)
            kv = [attention.text_kv(block.attn2, projected) for block in self.transformer.blocks]
        self._prompts[prompt] = kv
        while len(self._prompts) > PROMPT_CACHE_SIZE:
            self._prompts.popitem(last=False)
        return kv

    def _generate(self, jobs: list[_Job]) -> None:
        """The denoising loop and the clean pass for jobs of one frame count, batched."""
        c = self.config
        frames = self.spec.pages_in_chunk(jobs[0].tick.meta.chunk_index)
        shape = (c.in_channels, frames, c.latent_height, c.latent_width)
        gens = [torch.Generator().manual_seed(noise_seed(j.tick.seed, j.tick.meta.chunk_index)) for j in jobs]
        x = _pin(
            torch.stack([torch.randn(shape, generator=g) for g in gens]).to(self.device, self.dtype), jobs
        )
        lengths = [len(j.context) for j in jobs]
        context_positions, positions = attention.context_positions(lengths, max(lengths), frames)
        cond = self._controls(jobs, frames)
        self._bind(jobs, frames, context_positions)
        try:
            for i, sigma in enumerate(self.sigmas):
                flow = self.forward(x, sigma, positions, cond)
                x0 = _pin(x - sigma * flow, jobs)
                if i + 1 < len(self.sigmas):
                    noise = torch.stack([torch.randn(shape, generator=g) for g in gens]).to(x)
                    x = _pin((1 - self.sigmas[i + 1]) * x0 + self.sigmas[i + 1] * noise, jobs)
            self._pass.collect = []
            self.forward(x0, 0.0, positions, cond)
            collected = self._pass.collect
        finally:
            self._pass.context, self._pass.mask, self._pass.collect, self._pass.text = None, None, None, []
        # (layers, 2, batch, tokens, heads, hd) -> per job (frames, layers, 2, tokens/frame, heads, hd)
        kv = torch.stack([torch.stack(pair) for pair in collected])
        kv = kv.reshape(*kv.shape[:3], frames, self.tokens_per_frame, *kv.shape[4:]).permute(
            2, 3, 0, 1, 4, 5, 6
        )
        for job, latents, chunk_kv in zip(jobs, x0, kv, strict=True):
            job.latents, job.kv = latents, chunk_kv.contiguous()

    def _bind(self, jobs: list[_Job], frames: int, positions: Tensor) -> None:
        """Point the processors at this batch's prompts and padded contexts, the cached keys rotated
        once for the whole chunk at the context ``positions`` (batch, width) they hold now."""
        state = self._pass
        state.text = [
            (torch.cat([j.text[layer][0] for j in jobs]), torch.cat([j.text[layer][1] for j in jobs]))
            for layer in range(self.num_layers)
        ]
        width = max(len(j.context) for j in jobs)
        if width == 0:
            state.context, state.mask = None, None
            return
        pad = torch.zeros_like(next(j.context[0] for j in jobs if j.context))
        rows = torch.stack([torch.stack([pad] * (width - len(j.context)) + j.context) for j in jobs])
        # (batch, width, layers, 2, T, heads, hd) -> per layer (batch, width*T, heads, hd)
        per_layer = rows.permute(2, 3, 0, 1, 4, 5, 6).flatten(3, 4)
        c = self.config
        cos, sin = attention.rope(self.transformer, positions, c.latent_height, c.latent_width)
        rotary = (cos.to(self.device), sin.to(self.device))
        state.context = [(attention.rotate_keys(layer[0], rotary), layer[1]) for layer in per_layer]
        t = self.tokens_per_frame
        valid = [
            [False] * (width - len(j.context)) * t + [True] * (len(j.context) + frames) * t for j in jobs
        ]
        state.mask = torch.tensor(valid, device=self.device)[:, None, None, :]

    def _controls(self, jobs: list[_Job], frames: int) -> Tensor | None:
        if self.control_embedding is None:
            return None
        vectors = torch.stack([controls.encode(j.tick.controls, self.config.keys, frames) for j in jobs])
        return vectors.to(self.device, self.dtype)

    def forward(self, x: Tensor, sigma: float, positions: Tensor, cond: Tensor | None) -> Tensor:
        """The stock transformer's modules on one chunk per row, with cached context: the flow."""
        tr = self.transformer
        batch, _, frames, height, width = x.shape
        rotary = attention.rope(tr, positions, height, width)
        rotary = (rotary[0].to(x.device), rotary[1].to(x.device))
        hidden = tr.patch_embedding(x).flatten(2).transpose(1, 2).contiguous()
        embedder = tr.condition_embedder
        t = torch.full((batch,), sigma * 1000.0, device=x.device)
        # As the stock embedder: the time embedder may be kept in float32 under a bfloat16 model.
        time_dtype = next(embedder.time_embedder.parameters()).dtype
        temb = embedder.time_embedder(embedder.timesteps_proj(t).to(time_dtype)).type_as(hidden)
        if cond is not None:
            # Per frame: the step's time embedding plus the frame's controls, for each of its tokens.
            temb = temb[:, None] + self.control_embedding(cond)  # type: ignore[misc]
            temb = temb.repeat_interleave(hidden.shape[1] // frames, dim=1)
            proj = embedder.time_proj(embedder.act_fn(temb)).unflatten(2, (6, -1))
        else:
            proj = embedder.time_proj(embedder.act_fn(temb)).unflatten(1, (6, -1))
        for block in tr.blocks:
            hidden = block(hidden, None, proj, rotary)
        if temb.ndim == 3:
            shift, scale = (tr.scale_shift_table.unsqueeze(0) + temb.unsqueeze(2)).chunk(2, dim=2)
            shift, scale = shift.squeeze(2), scale.squeeze(2)
        else:
            shift, scale = (tr.scale_shift_table + temb.unsqueeze(1)).chunk(2, dim=1)
        hidden = (tr.norm_out(hidden.float()) * (1 + scale) + shift).type_as(hidden)
        hidden = tr.proj_out(hidden)
        p_t, p_h, p_w = tr.config.patch_size
        hidden = hidden.reshape(batch, frames // p_t, height // p_h, width // p_w, p_t, p_h, p_w, -1)
        return hidden.permute(0, 7, 1, 4, 2, 5, 3, 6).flatten(6, 7).flatten(4, 5).flatten(2, 3)  # type: ignore[no-any-return]

    def _decode(self, job: _Job) -> tuple[np.ndarray, DecoderState]:
        assert job.latents is not None
        state = job.session.decoder if job.session is not None else DecoderState()
        video, state = decode_chunk(self.vae, job.latents[None], state)
        frames = ((video[0].float().permute(1, 2, 3, 0) + 1) * 127.5).round().clamp(0, 255)
        if self.on_latents is not None:
            self.on_latents(job.tick.meta.request_id, job.latents)
        return frames.to(torch.uint8).cpu().numpy(), state

    def _commit(self, job: _Job, decoder: DecoderState, kv_storage: Any) -> None:
        """The chunk succeeded: its K/V become pages, and the session moves on."""
        assert job.kv is not None
        tick = job.tick
        key = (tick.prompt, tick.prompt_blend)
        session = job.session or _Session(text_key=key, text=job.text, decoder=decoder)
        if kv_storage is not None:
            for page, frame_kv in zip(tick.write_pages, job.kv, strict=True):
                kv_storage[page] = frame_kv
        else:
            session.pages.extend(job.kv)
            keep = self.config.sink_frames, self.config.window_frames
            session.pages[keep[0] : max(keep[0], len(session.pages) - keep[1])] = []
        session.text_key, session.text, session.decoder = key, job.text, decoder
        self._sessions[tick.meta.session_id] = session


def _pin(x: Tensor, jobs: list[_Job]) -> Tensor:
    """Rows with a seed image keep its latent as their first frame, clean, at every step (I2V by
    first-frame replacement, as Wan 2.2's TI2V conditions): the rest of the chunk is denoised
    around it, and the clean pass writes it to the KV cache like any generated frame."""
    for row, job in enumerate(jobs):
        if job.seed_latent is not None:
            x[row, :, :1] = job.seed_latent
    return x


def _by_frames(jobs: list[_Job], spec: WorldSpec) -> list[list[_Job]]:
    groups: dict[int, list[_Job]] = {}
    for job in jobs:
        groups.setdefault(spec.pages_in_chunk(job.tick.meta.chunk_index), []).append(job)
    return list(groups.values())


def noise_seed(seed: int, chunk_index: int) -> int:
    """The seed of a chunk's noise generator: a function of the session seed and chunk index only."""
    parts = [seed & 0xFFFFFFFF, seed >> 32 & 0xFFFFFFFF, chunk_index]
    return int(np.random.SeedSequence(parts).generate_state(1)[0])
