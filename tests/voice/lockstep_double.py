"""A deterministic lockstep (native duplex) voice model, for the session side's tests.

It keeps the ``models/lockstep.py`` contract with rules a test can drive from
the input: after a loud input frame followed by ``QUIET_BEFORE_REPLY`` quiet
ones it speaks for ``REPLY_FRAMES`` frames (a tone, one word of inner text
every ``FRAMES_PER_WORD`` frames), then listens. It does not stop when talked
over (the session's barge-in must cut it). An input frame starting with the
``POISON`` sample makes ``step`` raise for the whole batch (so the clock must
bisect to the session that sent it). Each slot's result depends only on that
slot's own frames (continuous batching).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from livegen.errors import CapacityExceeded
from livegen.models import Kind, ModelInfo, Registry
from livegen.models.lockstep import LockstepFrame, LockstepSpec
from livegen.models.voice import ModelHealth

RATE = 24_000
FRAME_SAMPLES = 960  # 40 ms
QUIET_BEFORE_REPLY = 3
REPLY_FRAMES = 25  # one second
FRAMES_PER_WORD = 5
POISON = -12345
LOUD = 2000  # mean absolute sample of a frame the double hears as speech


@dataclass
class SlotState:
    session_id: str
    heard_speech: bool = False
    quiet: int = 0
    speaking_left: int = 0
    spoken: int = 0
    #: Every input frame this slot was stepped with, in order (silence included).
    frames: list[bytes] = field(default_factory=list)


class LockstepDouble:
    """A deterministic ``LockstepModel`` (see the module docstring)."""

    def __init__(self, max_sessions: int = 4, step_delay_s: float = 0.0) -> None:
        self.spec = LockstepSpec(sample_rate=RATE, frame_samples=FRAME_SAMPLES, max_sessions=max_sessions)
        self.slots: dict[int, SlotState] = {}
        #: The input frames of each closed slot, by slot (the last session to hold it).
        self.closed: dict[int, list[bytes]] = {}
        self.step_delay_s = step_delay_s
        #: The slots of every step asked for, and of every step that answered, in order.
        self.attempts: list[tuple[int, ...]] = []
        #: The slots of every step that raised.
        self.raised: list[tuple[int, ...]] = []
        self.batches: list[tuple[int, ...]] = []
        self.threads: set[str] = set()
        self.thread_ids: set[int] = set()
        self._lock = threading.Lock()
        tone = np.sin(2 * np.pi * 440 * np.arange(FRAME_SAMPLES) / RATE) * 6000
        self._tone = tone.astype("<i2").tobytes()
        self._silence = bytes(2 * FRAME_SAMPLES)

    def open_slot(self, session_id: str, seed: int) -> int:
        with self._lock:
            free = [slot for slot in range(self.spec.max_sessions) if slot not in self.slots]
            if not free:
                raise CapacityExceeded(f"all {self.spec.max_sessions} slots are taken")
            self.slots[free[0]] = SlotState(session_id)
            return free[0]

    def close_slot(self, slot: int) -> None:
        with self._lock:
            state = self.slots.pop(slot, None)
            if state is not None:
                self.closed[slot] = state.frames

    def health(self) -> ModelHealth:
        return ModelHealth(detail={"double_slots": len(self.slots)})

    def step(self, slots: Sequence[int], frames: Sequence[bytes]) -> list[LockstepFrame]:
        self.threads.add(threading.current_thread().name)
        self.thread_ids.add(threading.get_ident())
        self.attempts.append(tuple(slots))
        arrays = [np.frombuffer(frame, "<i2") for frame in frames]
        if any(len(a) and a[0] == POISON for a in arrays):
            self.raised.append(tuple(slots))
            raise ValueError("a poisoned input frame")
        if self.step_delay_s:
            time.sleep(self.step_delay_s)
        self.batches.append(tuple(slots))
        return [
            self._one(self.slots[slot], frame, a)
            for slot, frame, a in zip(slots, frames, arrays, strict=True)
        ]

    def _one(self, state: SlotState, frame: bytes, samples: np.ndarray) -> LockstepFrame:
        state.frames.append(frame)
        loud = bool(len(samples)) and float(np.abs(samples.astype(np.int32)).mean()) >= LOUD
        if state.speaking_left:
            state.speaking_left -= 1
            state.spoken += 1
            text = f"w{state.spoken // FRAMES_PER_WORD} " if state.spoken % FRAMES_PER_WORD == 1 else ""
            return LockstepFrame(self._tone, text, speaking=True)
        if loud:
            state.heard_speech, state.quiet = True, 0
        elif state.heard_speech:
            state.quiet += 1
            if state.quiet >= QUIET_BEFORE_REPLY:
                state.heard_speech, state.quiet, state.spoken = False, 0, 0
                state.speaking_left = REPLY_FRAMES
        return LockstepFrame(self._silence, "", speaking=False)


class SlowDouble(LockstepDouble):
    """Its step takes longer than a frame: a second session cannot be held at the frame clock."""

    def __init__(self) -> None:
        super().__init__(step_delay_s=0.06)


def load() -> LockstepDouble:
    return LockstepDouble()


def load_one_slot() -> LockstepDouble:
    return LockstepDouble(max_sessions=1)


def load_slow() -> SlowDouble:
    return SlowDouble()


def registry() -> Registry:
    return Registry(
        [
            ModelInfo("duplex-double", Kind.VOICE, "voice.lockstep_double:load", "a lockstep test double"),
            ModelInfo("duplex-one", Kind.VOICE, "voice.lockstep_double:load_one_slot", "one slot"),
            ModelInfo("duplex-slow", Kind.VOICE, "voice.lockstep_double:load_slow", "a slow step"),
        ]
    )


def pcm(ms: int, loud: bool) -> bytes:
    """``ms`` of 24 kHz PCM16: a loud 300 Hz tone, or silence."""
    t = np.arange(RATE * ms // 1000) / RATE
    return (np.sin(2 * np.pi * 300 * t) * (9000 if loud else 0)).astype("<i2").tobytes()
