"""Per-slot ring KV caches: every session keeps its own positions in one bounded tensor pool.

Sessions join the frame clock at different frames, so one batched step holds rows at different
positions. The stock ``DynamicCache`` keeps one length for the whole batch; this pool keeps, per
slot, a ring of ``window + chunk - 1`` cells per layer and the absolute position held in each cell.
A step writes its keys at ``position % ring`` of each row (after RoPE at that row's own positions,
so a row's attention is what it would be alone) and attends through a mask built from the stored
positions: a cell is seen when it was written, is not in the query's future, and lies within the
model's sliding window. The pool is allocated once (``slots x layers x ring``), so memory is flat
however long a session runs; RoPE is relative, so ring order never matters.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


class RingKV:
    """K/V of ``layers`` attention layers for ``slots`` sessions, each a ring over ``window`` positions."""

    def __init__(
        self,
        *,
        layers: int,
        slots: int,
        kv_heads: int,
        head_dim: int,
        window: int,
        chunk: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        self.window = window
        self.chunk = chunk
        self.ring = window + chunk - 1  # room for a whole chunk without evicting a key it still sees
        shape = (slots, kv_heads, self.ring, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        #: Absolute position held in each cell, -1 where empty.
        self.cell_pos = torch.full((slots, self.ring), -1, dtype=torch.long, device=device)
        #: The next position of each slot.
        self.next_pos = torch.zeros(slots, dtype=torch.long, device=device)

    def reset(self, slot: int) -> None:
        for tensor in (*self.keys, *self.values):
            tensor[slot].zero_()
        self.cell_pos[slot] = -1
        self.next_pos[slot] = 0

    def nbytes(self) -> int:
        tensors = (*self.keys, *self.values, self.cell_pos, self.next_pos)
        return sum(t.numel() * t.element_size() for t in tensors)

    def begin(self, rows: Tensor, length: int) -> RingStep:
        """Claim the next ``length`` positions of each row; returns the step's cache view."""
        offsets = torch.arange(length, device=rows.device)
        positions = self.next_pos[rows][:, None] + offsets  # (B, length)
        cells = positions % self.ring
        self.cell_pos[rows[:, None], cells] = positions
        self.next_pos[rows] += length
        held = self.cell_pos[rows][:, None, :]  # (B, 1, ring)
        query = positions[:, :, None]  # (B, length, 1)
        visible = (held >= 0) & (held <= query) & (query - held < self.window)
        return RingStep(self, rows, positions, cells, visible[:, None])


class RingStep:
    """One step's view of the pool, with the ``update`` the stock attention modules call."""

    def __init__(self, pool: RingKV, rows: Tensor, positions: Tensor, cells: Tensor, mask: Tensor) -> None:
        self.pool = pool
        self.rows = rows
        #: (B, length) positions of this step's queries, for RoPE.
        self.positions = positions
        self.cells = cells
        #: (B, 1, length, ring) bool: which cells each query sees.
        self.mask = mask
        first = int(rows[0]) if len(rows) else 0
        contiguous = torch.equal(rows, torch.arange(first, first + len(rows), device=rows.device))
        # Rows first..first+B read a view of the pool; scattered rows read a gathered copy.
        self._span = slice(first, first + len(rows)) if contiguous else None

    def update(
        self, key: Tensor, value: Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[Tensor, Tensor]:
        keys, values = self.pool.keys[layer_idx], self.pool.values[layer_idx]
        # Advanced indices around a slice put (B, length) first: cells take (B, length, heads, dim).
        keys[self.rows[:, None], :, self.cells] = key.transpose(1, 2).to(keys.dtype)
        values[self.rows[:, None], :, self.cells] = value.transpose(1, 2).to(values.dtype)
        if self._span is not None:
            return keys[self._span], values[self._span]
        return keys[self.rows], values[self.rows]
