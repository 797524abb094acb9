"""Generating frames with the tiny-world net: the flow sampler and a plain rollout.

The sampler is rectified flow with x0-prediction: start from seeded noise at
t=1, predict the clean frame, step deterministically (DDIM-like) to the next
noise level, and after the last step append the frame's K/V to the cache with
one clean pass (t=0), as in training. ``rollout`` keeps its own list cache
(sinks + window) and is what the training probe, the tests and the bench's
reference path use; the served model (``model.py``) does the same over KV
pages and many sessions at once.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from livegen.models.room import game
from livegen.models.tinyworld.net import Context, Net, to_uint8, to_unit
from livegen.models.tinyworld.vocab import ACTION_INDEX, THEME_INDEX

KV = list[tuple[Tensor, Tensor]]


def noise_levels(num_steps: int) -> list[float]:
    return [1.0 - k / num_steps for k in range(num_steps + 1)]


@torch.no_grad()
def sample_frame(
    net: Net,
    prev: Tensor,
    action: Tensor,
    theme: Tensor,
    noise: Tensor,
    ctx: Context | None,
    num_steps: int,
    deadband: float = 0.0,
    palette: Tensor | None = None,
) -> Tensor:
    """Denoise one frame per row from ``noise`` (B, 3, 32, 32); returns it as uint8 (B, 32, 32, 3)."""
    levels = noise_levels(num_steps)
    x = noise
    x0 = noise
    for t, t_next in itertools.pairwise(levels):
        c = net.cond(torch.full((x.shape[0],), t), action, theme)
        pred, _ = net.run_frame(x, prev, c, ctx, decode=True)
        assert pred is not None
        x0 = pred
        if t_next > 0:
            eps = (x - (1 - t) * x0) / t
            x = (1 - t_next) * x0 + t_next * eps
    return to_uint8(snap_to_palette(hold_still(x0, prev, deadband), palette))


def hold_still(x0: Tensor, prev: Tensor, deadband: float) -> Tensor:
    """Pixels whose predicted change is below ``deadband`` (in [-1, 1] units, any channel) keep the
    previous frame's value exactly, so that small residual errors cannot accumulate into drift."""
    if deadband <= 0:
        return x0
    still = (x0 - prev).abs().amax(dim=1, keepdim=True) < deadband
    return torch.where(still, prev, x0)


def snap_to_palette(x0: Tensor, palette: Tensor | None) -> Tensor:
    """Each pixel of ``x0`` (B, 3, H, W) decoded to one colour of ``palette`` (B, K, 3), all in
    [-1, 1], so that a rollout's context stays made of colours the model was trained on.

    Where the model is unsure (did the agent move?), its x0 is a blend of the outcomes, and the
    nearest palette colour to a blend of red agent and green floor can be a third colour (the
    brown of the crate), which then stands in the room as an obstacle. So each pixel is read as
    a mix of two palette colours (the pair whose segment passes nearest to it, a colour with
    itself included) and decoded to the larger part of the mix."""
    if palette is None:
        return x0
    b, k = palette.shape[:2]
    pixels = x0.permute(0, 2, 3, 1).reshape(b, -1, 3)  # (B, N, 3)
    # The same geometry from dot products (B, N, K) and (B, K, K) instead of (B, N, K, K, 3)
    # vectors: a third of the work and no 5-D temporaries (this ran for ~30% of a step).
    xp = pixels @ palette.transpose(1, 2)  # (B, N, K): pixel . colour
    pp = palette @ palette.transpose(1, 2)  # (B, K, K): colour . colour
    norms = pp.diagonal(dim1=1, dim2=2)  # (B, K)
    # (x - c_i) . (c_j - c_i) and |c_j - c_i|^2, for the segment from colour i to colour j
    dot = xp[:, :, None, :] - xp[:, :, :, None] - pp[:, None] + norms[:, None, :, None]
    length2 = norms[:, :, None] + norms[:, None, :] - 2 * pp  # (B, K, K)
    along = (dot / length2.clamp(min=1e-6)[:, None]).clamp(0, 1)  # (B, N, K, K)
    to_start = (pixels * pixels).sum(-1, keepdim=True) - 2 * xp + norms[:, None]  # |x - c_i|^2
    miss = to_start[..., None] - 2 * along * dot + along * along * length2[:, None]
    pair = miss.flatten(2).argmin(-1)  # (B, N)
    share = along.flatten(2).gather(-1, pair[..., None]).squeeze(-1)
    colour = torch.where(share < 0.5, pair // k, pair % k)
    decoded = palette.gather(1, colour[..., None].expand(-1, -1, 3))  # (B, N, 3)
    return decoded.transpose(1, 2).reshape(x0.shape)


def palette_tensor(palettes: dict[str, list[list[int]]], themes: Sequence[str]) -> Tensor:
    """The codebooks of ``themes`` as one (B, K, 3) tensor in [-1, 1], shorter ones padded with
    their own first colour (a repeat never changes the nearest match)."""
    width = max(len(palettes[t]) for t in themes)
    rows = [palettes[t] + [palettes[t][0]] * (width - len(palettes[t])) for t in themes]
    return to_unit(torch.tensor(rows, dtype=torch.uint8)[:, :, None, :]).squeeze(-1).transpose(1, 2)


def palette_table(palettes: dict[str, list[list[int]]] | None) -> Tensor | None:
    """Every theme's codebook, one row per theme index (index it with a batch's theme tensor)."""
    return None if palettes is None else palette_tensor(palettes, game.THEMES)


@torch.no_grad()
def encode_clean(
    net: Net,
    frame: Tensor,
    prev: Tensor,
    action: Tensor,
    theme: Tensor,
    ctx: Context | None,
) -> KV:
    """The K/V a finished frame (B, 3, 32, 32) leaves in the cache."""
    c = net.cond(torch.zeros(frame.shape[0]), action, theme)
    _, kv = net.run_frame(frame, prev, c, ctx, decode=False)
    return kv


def stack_context(frames_kv: Sequence[KV]) -> KV | None:
    """Per-frame K/V lists (oldest first) -> per-layer K/V over all of them."""
    if not frames_kv:
        return None
    num_layers = len(frames_kv[0])
    return [
        (torch.cat([f[i][0] for f in frames_kv], dim=2), torch.cat([f[i][1] for f in frames_kv], dim=2))
        for i in range(num_layers)
    ]


@torch.no_grad()
def rollout(
    net: Net,
    first: npt.NDArray[np.uint8],
    actions: Sequence[str],
    themes: Sequence[str],
    *,
    seed: int,
    num_steps: int = 2,
    deadband: float = 0.0,
    sink_frames: int = 1,
    window_frames: int = 2,
    palettes: dict[str, list[list[int]]] | None = None,
) -> npt.NDArray[np.uint8]:
    """Frames [first, then one per action] for one session; ``themes`` per generated frame."""
    gen = torch.Generator().manual_seed(seed)
    table = palette_table(palettes)
    cache: list[KV] = []
    frame = to_unit(torch.from_numpy(first))[None]
    prev = frame
    zero = torch.zeros(1, dtype=torch.long)
    theme0 = torch.tensor([THEME_INDEX[themes[0]]])
    cache.append(encode_clean(net, frame, prev, zero, theme0, None))
    out = [first]
    for action_name, theme_name in zip(actions, themes, strict=True):
        ctx = net.context(stack_context(cache))
        action = torch.tensor([ACTION_INDEX[action_name]])
        theme = torch.tensor([THEME_INDEX[theme_name]])
        noise = torch.randn(1, 3, game.SIZE, game.SIZE, generator=gen)
        palette = None if table is None else table[theme]
        image = sample_frame(net, frame, action, theme, noise, ctx, num_steps, deadband, palette)
        prev, frame = frame, to_unit(image)
        cache.append(encode_clean(net, frame, prev, action, theme, ctx))
        if len(cache) > sink_frames + window_frames:
            del cache[sink_frames]
        out.append(image[0].numpy())
    return np.stack(out)
