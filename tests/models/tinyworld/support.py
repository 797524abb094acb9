"""Helpers for tiny-world's tests (serving and training): a small random network and ticks.

Contract tests run a small randomly initialised network: fast, and the
contract does not depend on what the weights learned.
"""

from __future__ import annotations

import torch

from livegen.models.tinyworld.net import Config, Net
from livegen.models.world import Tick, TickMeta

SMALL = Config(d_model=32, num_layers=2, num_heads=2, stem_channels=16, up_channels=8)


def random_net(cfg: Config = SMALL, seed: int = 0) -> Net:
    """A net whose zero-initialised gates are perturbed, so every path affects the output."""
    torch.manual_seed(seed)
    net = Net(cfg)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return net.eval()


def tick(
    session: str,
    chunk: int,
    *,
    seed: int = 5,
    action: str = "right",
    prompt: str = "a lava room",
    context: tuple[int, ...] = (),
    write: tuple[int, ...] = (),
) -> Tick:
    return Tick(
        meta=TickMeta(session, f"req-{session}-{chunk}", chunk, (chunk,)),
        seed=seed,
        prompt=prompt,
        controls={"action": {"action": action}},
        context_pages=context,
        write_pages=write,
    )
