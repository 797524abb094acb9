"""A cheap energy detector, for server VAD when the model has no detector of its own.

A model with ``has_vad`` reports speech itself (a cascade runs Silero); for a
model without one, the session core runs this instead, so that
``turn_detection: server_vad`` still ends turns and still barges in. It scores
10 ms frames by RMS level: ``threshold`` 0.5 (OpenAI's default) maps to
-35 dBFS, and 0..1 spans -60..-10 dBFS. Speech starts after 30 ms of loud
frames and stops after ``silence_duration_ms`` of quiet ones. Times are in ms
of input audio since the session began, as OpenAI reports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

FRAME_MS = 10
START_FRAMES = 3


class Edge(StrEnum):
    STARTED = "started"
    STOPPED = "stopped"


@dataclass(frozen=True)
class Transition:
    edge: Edge
    audio_ms: int


class EnergyVad:
    def __init__(self, rate: int, threshold: float = 0.5, silence_duration_ms: int = 500) -> None:
        self.rate = rate
        self.level = 32768.0 * 10 ** ((-60.0 + 50.0 * threshold) / 20.0)
        self.silence_frames = max(1, silence_duration_ms // FRAME_MS)
        self._frame_samples = rate * FRAME_MS // 1000
        self._carry = np.zeros(0, dtype=np.int16)
        self._num_frames = 0
        self.is_speaking = False
        self._run = 0

    def feed(self, pcm: bytes) -> list[Transition]:
        samples = np.concatenate([self._carry, np.frombuffer(pcm, dtype="<i2")])
        num_frames = len(samples) // self._frame_samples
        self._carry = samples[num_frames * self._frame_samples :]
        if num_frames == 0:
            return []
        frames = samples[: num_frames * self._frame_samples].reshape(num_frames, -1).astype(np.float32)
        loud = np.sqrt(np.mean(frames * frames, axis=1)) >= self.level
        transitions: list[Transition] = []
        for is_loud in loud:
            self._num_frames += 1
            if is_loud != self.is_speaking:
                self._run += 1
            else:
                self._run = 0
            if not self.is_speaking and self._run >= START_FRAMES:
                self.is_speaking, self._run = True, 0
                transitions.append(Transition(Edge.STARTED, (self._num_frames - START_FRAMES) * FRAME_MS))
            elif self.is_speaking and self._run >= self.silence_frames:
                self.is_speaking, self._run = False, 0
                transitions.append(
                    Transition(Edge.STOPPED, (self._num_frames - self.silence_frames) * FRAME_MS)
                )
        return transitions

    def reset(self) -> None:
        """Forget a turn in progress (input cleared); the audio clock keeps running."""
        self.is_speaking = False
        self._run = 0
