"""Silero v6 on ONNX Runtime (``LIVEGEN_VAD=onnx``): it finds the same turns as the default detector.

Real models on real synthesised speech: a question with a pause in it, then
silence; both detectors must report the start and the stop, at about the
same places (within a few frames: the models are different versions).
"""

from __future__ import annotations

from typing import Any

import pytest

from livegen.models.cascade import assets, silero_onnx, vad
from livegen.models.voice import TurnDetection
from models.cascade.support import speak_as_user

pytestmark = pytest.mark.slow


def _events(pcm: bytes) -> list[vad.Turn]:
    detector = vad.Detector(str(assets.silero_model()), TurnDetection())
    return [turn for start in range(0, len(pcm), 640) for turn in detector.feed(pcm[start : start + 640])]


def test_the_onnx_detector_finds_the_turns_the_default_one_does(
    cascade: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pcm = speak_as_user(cascade, "Repeat after me, the weather is lovely.", lead_s=0.5, trail_s=1.5)
    default = _events(pcm)
    monkeypatch.setenv("LIVEGEN_VAD", "onnx")
    assert silero_onnx.is_chosen()
    onnx = _events(pcm)

    def edges(events: list[vad.Turn]) -> list[tuple[vad.Event, int]]:
        wanted = (vad.Event.SPEECH_STARTED, vad.Event.SPEECH_STOPPED)
        return [(turn.event, turn.sample) for turn in events if turn.event in wanted]

    assert [event for event, _ in edges(onnx)] == [vad.Event.SPEECH_STARTED, vad.Event.SPEECH_STOPPED]
    assert [event for event, _ in edges(default)] == [event for event, _ in edges(onnx)]
    for (_, ours), (_, theirs) in zip(edges(onnx), edges(default), strict=True):
        assert abs(ours - theirs) <= 4 * vad.FRAME_SAMPLES
