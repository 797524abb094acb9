"""The end-of-turn model behind ``semantic_vad``: Smart Turn v3.2, run with onnxruntime.

At a pause, VAD alone cannot tell "book a table for ..." from "book a table
for four people.": both end in silence. Smart Turn v3.2 (Daily's ~8 MB
Whisper-tiny-encoder classifier, BSD-2-Clause) hears the intonation and the
words of the last 8 s of the turn and says how likely the turn is complete.

Its weights come from the PyPI wheel ``pipecat-ai`` (BSD-2-Clause, the file
``pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx``), pinned by
version and sha256 like every other weight (``assets``). Only the data file
is used: pipecat's Python code is never imported. The input features are
computed here, as the model was trained on them: the last 8 s of 16 kHz audio
(zeros in front when shorter), normalised to zero mean and unit variance,
then Whisper's 80-bin log-mel spectrogram (800 frames of 10 ms), for which
faster-whisper's numpy feature extractor is reused.

One ``Endpointer`` serves every session of the process behind one thread
(a call is ~10-30 ms on one core; sessions queue rather than fight over the
cores Whisper needs), and never on the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import importlib.util
import logging
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from livegen.errors import ConfigError
from livegen.models.cascade.assets import Asset, verify

logger = logging.getLogger("livegen.models.cascade")

SAMPLE_RATE = 16_000
#: The model hears at most the last 8 s of the turn.
WINDOW_S = 8
SMART_TURN = Asset(
    "pipecat-ai",
    "1.14.0",
    "Smart Turn v3.2 end-of-turn model, ONNX (BSD-2-Clause)",
    "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f",
)
_RELATIVE_PATH = ("audio", "turn", "smart_turn", "data", "smart-turn-v3.2-cpu.onnx")
#: Whisper's normalisation adds this to the variance (transformers' WhisperFeatureExtractor).
_VARIANCE_EPS = 1e-7


def model_path() -> Path:
    """Smart Turn's ONNX file inside the installed pipecat-ai, checked against the pin.

    The package is located without importing it (importing pipecat starts its
    logging and pulls its dependencies); ``ConfigError`` if it is absent, of
    another version, or the file differs.
    """
    spec = importlib.util.find_spec("pipecat")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"{SMART_TURN.package} is not installed (semantic_vad's end-of-turn model); "
            f"run: pip install 'livegen[turn]'"
        )
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*_RELATIVE_PATH)
    verify(SMART_TURN, path)
    return path


def load() -> Endpointer | None:
    """The process's end-of-turn model, or None (one log line) when pipecat-ai is not installed.

    Absent, ``semantic_vad`` falls back to eagerness-timed silence; present but
    of another version or with another file, loading fails (``ConfigError``)
    as for every pinned weight.
    """
    if importlib.util.find_spec("pipecat") is None:
        logger.warning(
            "semantic_vad has no end-of-turn model (%s is not installed; pip install 'livegen[turn]'): "
            "it ends turns after a silence set by eagerness",
            SMART_TURN.package,
        )
        return None
    return Endpointer()


def features(audio: np.ndarray) -> np.ndarray:
    """The model's input for a turn's 16 kHz float audio: shape (1, 80, 800), float32."""
    samples = WINDOW_S * SAMPLE_RATE
    window = np.zeros(samples, np.float32)
    tail = np.asarray(audio, np.float32)[-samples:]
    window[samples - len(tail) :] = tail
    window = (window - window.mean()) / np.sqrt(window.var() + _VARIANCE_EPS)
    log_mel = _mel_spectrogram()(window, padding=0)
    return np.asarray(log_mel, np.float32)[np.newaxis]


@functools.cache
def _mel_spectrogram() -> Any:
    from faster_whisper.feature_extractor import FeatureExtractor

    return FeatureExtractor(feature_size=80, chunk_length=WINDOW_S)


class Endpointer:
    """Smart Turn on one onnxruntime thread: ``probability`` of a turn's audio being complete."""

    def __init__(self, path: Path | None = None) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        path = path or model_path()
        self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="livegen-endpoint")
        #: Seconds per call (features and model), recent ones, for ``livegen bench voice-model``.
        self.timings: deque[float] = deque(maxlen=1000)

    def probability_now(self, audio: np.ndarray) -> float:
        """On the calling thread: how likely the turn in ``audio`` (16 kHz float) is complete."""
        started = time.perf_counter()
        (logits,) = self._session.run(None, {"input_features": features(audio)})
        # The exported graph ends in a sigmoid: its "logits" are already probabilities.
        probability = float(np.asarray(logits).reshape(-1)[0])
        self.timings.append(time.perf_counter() - started)
        return probability

    async def probability(self, audio: np.ndarray) -> float:
        """The same, on the model's own thread, so the event loop never waits for it."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self.probability_now, audio)

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)
