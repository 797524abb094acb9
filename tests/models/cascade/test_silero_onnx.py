"""Silero v6 on ONNX Runtime, the default detector, finds the turns pysilero's ggml Silero does.

Real models on real synthesised speech: a sentence with a pause in the middle
("I would like to ... book a table for four people."), then silence. With a
pause shorter than the silence window both detectors must keep one turn, with
the same speculation pause and resumption inside it; with a longer one both
must cut it in two. Every start and stop must fall within two frames of the
other detector's (the models are different builds: v6 and v6.2).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from livegen.bench.turn_cutoffs import Paused, paused_utterance
from livegen.models.cascade import assets, silero_onnx, vad
from livegen.models.voice import TurnDetection
from models.cascade.support import USER_VOICE

pytestmark = pytest.mark.slow


def _events(pcm: bytes) -> list[vad.Turn]:
    detector = vad.Detector(str(assets.silero_model()), TurnDetection())
    return [turn for start in range(0, len(pcm), 640) for turn in detector.feed(pcm[start : start + 640])]


def _pcm(paused: Paused, trail_s: float = 1.5) -> bytes:
    audio = np.concatenate([paused.audio, np.zeros(int(trail_s * vad.SAMPLE_RATE), np.float32)])
    pcm: bytes = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
    return pcm


def test_the_default_detector_is_silero_on_onnx_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LIVEGEN_VAD", raising=False)
    detector = vad.Detector(str(assets.silero_model()), TurnDetection())
    assert detector.backend == "onnx"
    assert isinstance(detector._silero, silero_onnx.OnnxSilero)
    monkeypatch.setenv("LIVEGEN_VAD", "ggml")
    assert vad.Detector(str(assets.silero_model()), TurnDetection()).backend == "ggml"


@pytest.mark.parametrize(("pause_ms", "num_turns"), [(300, 1), (800, 2)])
def test_both_detectors_find_the_same_turns_around_a_mid_sentence_pause(
    cascade: Any, monkeypatch: pytest.MonkeyPatch, pause_ms: int, num_turns: int
) -> None:
    words = ("I would like to", "book a table for four people.")
    paused = paused_utterance(cascade, *words, USER_VOICE, pause_ms)
    pcm = _pcm(paused)
    found = {}
    for backend in vad.BACKENDS:
        monkeypatch.setenv("LIVEGEN_VAD", backend)
        found[backend] = [(turn.event, turn.sample) for turn in _events(pcm)]
    onnx, ggml = found["onnx"], found["ggml"]

    starts = [sample for event, sample in onnx if event is vad.Event.SPEECH_STARTED]
    assert len(starts) == num_turns, onnx
    assert [event for event, _ in onnx] == [event for event, _ in ggml], (onnx, ggml)
    for (_, ours), (_, theirs) in zip(onnx, ggml, strict=True):
        assert abs(ours - theirs) <= 2 * vad.FRAME_SAMPLES, (onnx, ggml)
    # The turns are where the speech is: the last stop follows its end by the silence window.
    last_stop = [sample for event, sample in onnx if event is vad.Event.SPEECH_STOPPED][-1]
    window = TurnDetection().silence_duration_ms * vad.SAMPLE_RATE // 1000
    assert 0 <= last_stop - paused.speech_end - window <= 4 * vad.FRAME_SAMPLES
