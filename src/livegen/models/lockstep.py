"""The lockstep voice-model contract: fixed frames in, fixed frames out, many sessions per step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from livegen.models.voice import ModelHealth


@dataclass(frozen=True)
class LockstepSpec:
    sample_rate: int  # Hz of input and output PCM16 mono (Moshi: 24000)
    frame_samples: int  # samples per frame, in and out (Moshi: 1920 = 80 ms)
    max_sessions: int  # slots in the model's state pool (the batch can never exceed it)

    @property
    def frame_ms(self) -> float:
        return 1000.0 * self.frame_samples / self.sample_rate


@dataclass(frozen=True)
class LockstepFrame:
    """One session's output for one frame."""

    audio: bytes = field(repr=False)  # PCM16 LE mono, exactly frame_samples samples
    text: str = ""  # the model's inner text for this frame ("" when it emitted padding)
    speaking: bool = False  # the model is talking in this frame (it knows its own pad tokens)


@runtime_checkable
class LockstepModel(Protocol):
    spec: LockstepSpec

    def open_slot(self, session_id: str, seed: int) -> int:
        """Claim a state slot (KV cache + codec streaming state), reset; raises
        livegen.errors.CapacityExceeded when the pool is full."""
        ...

    def step(self, slots: Sequence[int], frames: Sequence[bytes]) -> list[LockstepFrame]:
        """One batched forward: frame i (PCM16, frame_samples samples) for slot i; blocking, called
        from one worker thread per model (never on the event loop); returns one LockstepFrame per slot.
        A slot's result must not depend on which other slots share the step (continuous batching)."""
        ...

    def close_slot(self, slot: int) -> None: ...

    def health(self) -> ModelHealth: ...
