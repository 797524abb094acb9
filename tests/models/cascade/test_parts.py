"""The cascade's small machines: turn detection, the repetition guard, worker frames."""

from __future__ import annotations

import io

import pytest

from livegen.errors import ConfigError
from livegen.models.cascade import asr, vad, wire
from livegen.models.voice import TurnDetection

FRAME = vad.FRAME_SAMPLES


def _feed(turns: vad.Turns, probabilities: list[float]) -> list[tuple[vad.Event, int]]:
    events: list[tuple[vad.Event, int]] = []
    for probability in probabilities:
        events.extend((turn.event, turn.sample) for turn in turns.feed(probability))
    return events


def test_speech_start_is_padded_and_stop_waits_for_the_silence_window() -> None:
    turns = vad.Turns(TurnDetection(threshold=0.5, prefix_padding_ms=96, silence_duration_ms=320))
    events = _feed(turns, [0.0] * 10 + [0.9] * 20 + [0.0] * 12)
    speech_start = 10 * FRAME
    speech_end = 30 * FRAME
    assert events == [
        (vad.Event.SPEECH_STARTED, speech_start - 3 * FRAME),
        (vad.Event.PAUSE, speech_end),
        (vad.Event.SPEECH_STOPPED, speech_end + 10 * FRAME),
    ]
    assert not turns.is_speaking


def test_speech_at_the_very_start_is_not_padded_before_zero() -> None:
    turns = vad.Turns(TurnDetection())
    assert _feed(turns, [0.9]) == [(vad.Event.SPEECH_STARTED, 0)]


def test_a_short_pause_then_more_speech_resumes_the_same_turn() -> None:
    turns = vad.Turns(TurnDetection(silence_duration_ms=500))
    pause_frames = vad.pause_ms(turns.settings) // vad.FRAME_MS + 1
    events = _feed(turns, [0.9] * 5 + [0.0] * pause_frames + [0.9] * 3)
    assert [event for event, _ in events] == [vad.Event.SPEECH_STARTED, vad.Event.PAUSE, vad.Event.RESUMED]
    assert turns.is_speaking


def test_the_hysteresis_band_counts_as_speech() -> None:
    turns = vad.Turns(TurnDetection(threshold=0.5, silence_duration_ms=160))
    # 0.4 is below the threshold but above threshold - 0.15: not silence.
    events = _feed(turns, [0.9] + [0.4] * 20)
    assert [event for event, _ in events] == [vad.Event.SPEECH_STARTED]


def test_pause_comes_well_before_the_silence_window() -> None:
    for silence_ms in (200, 500, 1000):
        pause = vad.pause_ms(TurnDetection(silence_duration_ms=silence_ms))
        assert 2 * vad.FRAME_MS <= pause < silence_ms


def test_the_detector_is_onnx_unless_livegen_vad_names_ggml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LIVEGEN_VAD", raising=False)
    assert vad.backend() == "onnx"
    monkeypatch.setenv("LIVEGEN_VAD", "GGML")
    assert vad.backend() == "ggml"
    monkeypatch.setenv("LIVEGEN_VAD", "webrtc")
    with pytest.raises(ConfigError, match="LIVEGEN_VAD='webrtc'"):
        vad.backend()


def test_reset_forgets_the_segment() -> None:
    turns = vad.Turns(TurnDetection())
    _feed(turns, [0.9] * 3)
    turns.reset()
    assert _feed(turns, [0.9])[0][0] is vad.Event.SPEECH_STARTED


@pytest.mark.parametrize(
    ("text", "is_loop"),
    [
        ("the the the the the", True),
        ("thank you thank you thank you", True),
        ("I said no, no, no.", False),
        ("What is 12 times 7?", False),
        ("one two three four five six", False),
        ("What time is it? What time", True),
        ("What is 12 times 7? What is 12 times 7", True),
        ("Is it what it is?", False),
    ],
)
def test_repetition_guard(text: str, is_loop: bool) -> None:
    assert asr.is_repetitive(text) is is_loop


def test_window_is_the_shortest_that_holds_the_audio() -> None:
    assert asr.window_for(2.0) == 10
    assert asr.window_for(9.8) == 20
    assert asr.window_for(25.0) == 30
    assert asr.window_for(45.0) == 30


@pytest.mark.parametrize("text", ["", "  ", "[BLANK_AUDIO]", "(music)", "..."])
def test_non_speech_transcripts_are_empty(text: str) -> None:
    assert asr.clean(text) == ""


def test_frames_round_trip_and_concatenate() -> None:
    stream = io.BytesIO()
    wire.write_frame(stream, {"id": 1, "text": "héllo"}, b"\x00\x01" * 10)
    wire.write_frame(stream, {"op": "cancel"})
    stream.seek(0)
    assert wire.read_frame(stream) == ({"id": 1, "text": "héllo"}, b"\x00\x01" * 10)
    assert wire.read_frame(stream) == ({"op": "cancel"}, b"")
    with pytest.raises(wire.FrameError, match="closed"):
        wire.read_frame(stream)


def test_a_truncated_frame_is_an_error_not_a_short_read() -> None:
    stream = io.BytesIO()
    wire.write_frame(stream, {"id": 1}, b"x" * 100)
    with pytest.raises(wire.FrameError, match="mid-frame"):
        wire.read_frame(io.BytesIO(stream.getvalue()[:-1]))


def test_an_absurd_frame_length_is_refused() -> None:
    with pytest.raises(wire.FrameError, match="limit"):
        wire.read_frame(io.BytesIO(b"\xff\xff\xff\xff"))
    with pytest.raises(wire.FrameError, match="object"):
        wire.read_frame(io.BytesIO(b"\x00\x00\x00\x02[]\x00\x00\x00\x00"))
