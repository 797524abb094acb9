"""The tiny-world network: a frame-causal transformer between a conv stem and a conv decoder.

Shaped by what the room game is and by a CPU budget. The game is Markov and
its moving parts are small (a 4x4 agent moving 2 px), so:

- every frame is predicted as *previous frame + residual*: the previous frame
  is concatenated onto the noisy frame at the input and added at the output,
  so copying the room is free and the capacity goes to what moves;
- the stem works at 16x16 after a 2x2 space-to-depth (the game lives on a
  2-px grid, so one move is one cell) and hands the decoder a full-detail skip
  connection: moving a sprite is a local shift the convolutions can learn;
- 64 tokens per frame (one per 4x4 pixels) go through a transformer whose
  attention is bidirectional within a frame and causal across frames, with
  RoPE over the frame index. Keys are stored *before* rotation, so a KV page
  can be read at any slot position (sinks first, then the window);
- conditioning (noise level, action, theme) enters by adaLN-zero in the
  transformer and FiLM in the convolutions.

The same ``Net`` serves training (``forward_train``: clean context frames and
noisy target frames in one masked sequence) and inference (``denoise`` and
``encode_clean`` against a per-layer context cache); tests check that both
paths agree.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

FRAME = 32
GRID = 8  # tokens per side
TOKENS_PER_FRAME = GRID * GRID
NUM_ACTIONS = 5
NUM_THEMES = 6


@dataclass(frozen=True)
class Config:
    d_model: int = 96
    num_layers: int = 4
    num_heads: int = 3
    mlp_ratio: int = 2
    stem_channels: int = 48
    up_channels: int = 32
    #: Context frames a target frame attends to (sinks + window at inference).
    context_frames: int = 3
    rope_base: float = 100.0

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


@dataclass
class Context:
    """Context frames' K/V for inference: per layer (K rotated to its slot, V), and a key mask."""

    layers: list[tuple[Tensor, Tensor]]
    num_frames: int
    mask: Tensor | None


class Film(nn.Module):
    """Scale and shift of conv features from the conditioning vector, identity at init."""

    def __init__(self, d_cond: int, channels: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_cond, 2 * channels)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, h: Tensor, c: Tensor) -> Tensor:
        scale, shift = self.proj(F.silu(c)).chunk(2, dim=-1)
        out: Tensor = h * (1 + scale[:, :, None, None]) + shift[:, :, None, None]
        return out


class Block(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        d = cfg.d_model
        self.num_heads, self.head_dim = cfg.num_heads, cfg.head_dim
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, cfg.mlp_ratio * d), nn.GELU(), nn.Linear(cfg.mlp_ratio * d, d))
        self.mod = nn.Linear(d, 6 * d)
        nn.init.zeros_(self.mod.weight)
        nn.init.zeros_(self.mod.bias)

    def keys_values(self, x: Tensor, c_tok: Tensor) -> tuple[Tensor, Tensor]:
        """This input's un-rotated K and V only (the last layer of a cache-append pass)."""
        b, n, _ = x.shape
        s1, b1 = self.mod(F.silu(c_tok)).chunk(6, dim=-1)[:2]
        h = self.norm1(x) * (1 + s1) + b1
        _, k, v = self.qkv(h).view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return k, v

    def forward(
        self,
        x: Tensor,
        c_tok: Tensor,
        rope: tuple[Tensor, Tensor],
        mask: Tensor | None,
        ctx: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One block; returns the output and this input's un-rotated K and V (B, H, N, hd).

        ``ctx`` is cached context (K already rotated to its slots, V);
        ``mask`` (B or 1, 1, Nq, Nk) says which keys each query may see.
        """
        b, n, d = x.shape
        s1, b1, g1, s2, b2, g2 = self.mod(F.silu(c_tok)).chunk(6, dim=-1)
        h = self.norm1(x) * (1 + s1) + b1
        q, k, v = self.qkv(h).view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        qr, kr = _rotate(q, *rope), _rotate(k, *rope)
        if ctx is not None:
            kr = torch.cat([ctx[0], kr], dim=2)
            v_all = torch.cat([ctx[1], v], dim=2)
        else:
            v_all = v
        a = F.scaled_dot_product_attention(qr, kr, v_all, attn_mask=mask)
        x = x + g1 * self.proj(a.transpose(1, 2).reshape(b, n, d))
        x = x + g2 * self.mlp(self.norm2(x) * (1 + s2) + b2)
        return x, k, v


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Net(nn.Module):
    def __init__(self, cfg: Config | None = None) -> None:
        super().__init__()
        cfg = cfg or Config()
        self.cfg = cfg
        d, sc, uc = cfg.d_model, cfg.stem_channels, cfg.up_channels
        self.t_freqs = nn.Parameter(torch.exp(-math.log(1000.0) * torch.arange(16) / 16), requires_grad=False)
        self.t_mlp = nn.Sequential(nn.Linear(32, d), nn.SiLU(), nn.Linear(d, d))
        self.action_emb = nn.Embedding(NUM_ACTIONS, d)
        self.theme_emb = nn.Embedding(NUM_THEMES, d)
        self.stem1 = nn.Conv2d(24, sc, 3, padding=1)
        self.stem2 = nn.Conv2d(sc, sc, 3, padding=1)
        self.stem_film = Film(d, sc)
        self.patch = nn.Conv2d(sc, d, 2, stride=2)
        self.pos = nn.Parameter(torch.randn(1, TOKENS_PER_FRAME, d) * 0.02)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.out_norm = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.out_mod = nn.Linear(d, 2 * d)
        nn.init.zeros_(self.out_mod.weight)
        nn.init.zeros_(self.out_mod.bias)
        self.unpatch = nn.Linear(d, 4 * uc)
        self.dec1 = nn.Conv2d(uc + sc, sc, 3, padding=1)
        self.dec_film = Film(d, sc)
        self.dec2 = nn.Conv2d(sc, sc, 3, padding=1)
        self.dec_out = nn.Conv2d(sc, 12, 1)
        nn.init.zeros_(self.dec_out.weight)
        assert self.dec_out.bias is not None
        nn.init.zeros_(self.dec_out.bias)

    # -- pieces -----------------------------------------------------------

    def cond(self, t: Tensor, action: Tensor, theme: Tensor) -> Tensor:
        """Conditioning vectors (N, d) from noise level in [0, 1], action and theme indices."""
        angles = t[:, None] * 1000.0 * self.t_freqs[None]
        t_emb = self.t_mlp(torch.cat([angles.sin(), angles.cos()], dim=-1))
        c: Tensor = t_emb + self.action_emb(action) + self.theme_emb(theme)
        return c

    def rope(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos/sin tables broadcastable to (B, H, N, hd/2) for per-token frame positions (B, N) or (N,)."""
        half = self.cfg.head_dim // 2
        exponents = torch.arange(half, dtype=torch.float32, device=positions.device) / half
        freqs = self.cfg.rope_base**-exponents
        angles = positions.to(torch.float32)[..., None] * freqs
        if angles.dim() == 2:
            angles = angles[None]
        return angles.cos()[:, None], angles.sin()[:, None]

    def stem(self, x_t: Tensor, prev: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
        """Frames (N, 3, 32, 32) in [-1, 1] -> skip features (N, sc, 16, 16), tokens (N, 64, d)."""
        h = F.pixel_unshuffle(torch.cat([x_t, prev], dim=1), 2)
        h = F.gelu(self.stem1(h))
        s = F.gelu(self.stem_film(self.stem2(h), c))
        tokens = self.patch(s).flatten(2).transpose(1, 2) + self.pos
        return s, tokens

    def decode(self, tokens: Tensor, skip: Tensor, prev: Tensor, c: Tensor) -> Tensor:
        """Tokens (N, 64, d) -> predicted clean frame (N, 3, 32, 32) = previous frame + residual."""
        n = tokens.shape[0]
        scale, shift = self.out_mod(F.silu(c)).chunk(2, dim=-1)
        h = self.out_norm(tokens) * (1 + scale[:, None]) + shift[:, None]
        h = self.unpatch(h).transpose(1, 2).reshape(n, -1, GRID, GRID)
        h = F.pixel_shuffle(h, 2)  # (N, uc, 16, 16)
        h = F.gelu(self.dec_film(self.dec1(torch.cat([h, skip], dim=1)), c))
        h = F.gelu(self.dec2(h))
        return prev + F.pixel_shuffle(self.dec_out(h), 2)

    # -- training ---------------------------------------------------------

    def forward_train(
        self,
        clean: Tensor,
        clean_prev: Tensor,
        clean_cond: Tensor,
        noisy: Tensor,
        noisy_prev: Tensor,
        noisy_cond: Tensor,
    ) -> Tensor:
        """Predict F target frames from their noisy versions, attending to F clean context frames.

        ``clean[:, i]`` is frame i, ``noisy[:, i]`` is frame i + 1 noised; all
        are (B, F, 3, 32, 32) with conds (B, F, d). Noisy frame i+1 sees clean
        frames 0..i and itself; clean frame i sees clean frames 0..i. Returns
        the predicted clean target frames (B, F, 3, 32, 32).
        """
        b, f = clean.shape[:2]
        frames = torch.cat([clean, noisy], dim=1).flatten(0, 1)
        prevs = torch.cat([clean_prev, noisy_prev], dim=1).flatten(0, 1)
        conds = torch.cat([clean_cond, noisy_cond], dim=1)  # (B, 2F, d)
        skip, tokens = self.stem(frames, prevs, conds.flatten(0, 1))
        x = tokens.reshape(b, 2 * f * TOKENS_PER_FRAME, -1)
        c_tok = conds.repeat_interleave(TOKENS_PER_FRAME, dim=1)
        frame_pos = torch.cat([torch.arange(f), torch.arange(1, f + 1)]).to(clean.device)
        rope = self.rope(frame_pos.repeat_interleave(TOKENS_PER_FRAME))
        mask = train_mask(f).repeat_interleave(TOKENS_PER_FRAME, 0).repeat_interleave(TOKENS_PER_FRAME, 1)
        mask = mask.to(clean.device)
        for block in self.blocks:
            x, _, _ = block(x, c_tok, rope, mask[None, None])
        out_tokens = x[:, f * TOKENS_PER_FRAME :].reshape(b * f, TOKENS_PER_FRAME, -1)
        skip_noisy = skip.view(b, 2 * f, *skip.shape[1:])[:, f:].flatten(0, 1)
        pred = self.decode(out_tokens, skip_noisy, noisy_prev.flatten(0, 1), noisy_cond.flatten(0, 1))
        return pred.view(b, f, *pred.shape[1:])

    # -- inference --------------------------------------------------------

    def context(self, kv: list[tuple[Tensor, Tensor]] | None, valid: Tensor | None = None) -> Context | None:
        """Cached K/V ready to attend to: per layer (K, V) of shape (B, H, C*64, hd), un-rotated,
        right-aligned at slot positions 0..C-1; ``valid`` (B, C) marks real (not padding) frames.
        Keys are rotated here once, and shared by every pass of the frame that follows."""
        if kv is None:
            return None
        num_frames = kv[0][0].shape[2] // TOKENS_PER_FRAME
        positions = torch.arange(num_frames, device=kv[0][0].device)
        cos, sin = self.rope(positions.repeat_interleave(TOKENS_PER_FRAME))
        mask = None
        if valid is not None:
            b = valid.shape[0]
            keys = torch.cat([valid.repeat_interleave(TOKENS_PER_FRAME, 1), valid.new_ones(b, 64)], 1)
            mask = keys[:, None, None, :]
        return Context([(_rotate(k, cos, sin), v) for k, v in kv], num_frames, mask)

    def run_frame(
        self, x_t: Tensor, prev: Tensor, c: Tensor, ctx: Context | None, *, decode: bool
    ) -> tuple[Tensor | None, list[tuple[Tensor, Tensor]]]:
        """One frame per batch row against cached context (see ``context``); the frame sits at
        position C. Returns the predicted clean frame (if ``decode``) and this frame's per-layer
        K/V for the cache.
        """
        num_ctx = 0 if ctx is None else ctx.num_frames
        skip, x = self.stem(x_t, prev, c)
        c_tok = c[:, None]
        rope = self.rope(torch.full((TOKENS_PER_FRAME,), num_ctx, device=x_t.device))
        mask = None if ctx is None else ctx.mask
        new_kv: list[tuple[Tensor, Tensor]] = []
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            assert isinstance(block, Block)
            layer_ctx = None if ctx is None else ctx.layers[i]
            if i == last and not decode:
                # the last block's output is only needed to decode; its K/V come from its input
                new_kv.append(block.keys_values(x, c_tok))
                break
            x, k, v = block(x, c_tok, rope, mask, layer_ctx)
            new_kv.append((k, v))
        pred = self.decode(x, skip, prev, c) if decode else None
        return pred, new_kv


def train_mask(num_frames: int) -> Tensor:
    """Frame-level mask over [clean 0..F-1, noisy 1..F]: True where a query frame sees a key frame."""
    f = num_frames
    clean_q = torch.cat(
        [torch.tril(torch.ones(f, f, dtype=torch.bool)), torch.zeros(f, f, dtype=torch.bool)], 1
    )
    noisy_q = torch.cat([torch.tril(torch.ones(f, f, dtype=torch.bool)), torch.eye(f, dtype=torch.bool)], 1)
    return torch.cat([clean_q, noisy_q], 0)


def to_unit(frames_uint8: Tensor) -> Tensor:
    """(..., 32, 32, 3) uint8 -> (..., 3, 32, 32) float in [-1, 1]."""
    return frames_uint8.movedim(-1, -3).to(torch.float32) / 127.5 - 1.0


def to_uint8(frames: Tensor) -> Tensor:
    """(..., 3, 32, 32) float in [-1, 1] -> (..., 32, 32, 3) uint8."""
    return ((frames.clamp(-1, 1) + 1.0) * 127.5).round().to(torch.uint8).movedim(-3, -1)
