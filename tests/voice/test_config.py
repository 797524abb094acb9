"""session.update parsing: turn detection in both dialects, semantic_vad by eagerness, refusals."""

from __future__ import annotations

import pytest

from livegen.errors import InvalidRequest
from livegen.protocol.realtime.fields import decode_session
from livegen.voice.config import Config, apply_update
from livegen.voice.turn_detection import SEMANTIC_SILENCE_MS


def _apply(config: Config, session: dict[str, object]) -> Config:
    """``session`` decoded as ``session.update``'s, then applied."""
    return apply_update(config, decode_session(session))


def _ga(detection: object) -> dict[str, object]:
    return {"audio": {"input": {"turn_detection": detection}}}


def test_server_vad_fields_apply_in_both_dialects_and_partially() -> None:
    config = _apply(Config(), _ga({"type": "server_vad", "silence_duration_ms": 900}))
    assert config.turn_detection is not None and config.turn_detection.silence_duration_ms == 900
    config = _apply(config, {"turn_detection": {"threshold": 0.8}})  # beta spelling, partial
    assert config.turn_detection is not None
    assert (config.turn_detection.threshold, config.turn_detection.silence_duration_ms) == (0.8, 900)
    assert _apply(config, _ga(None)).turn_detection is None


@pytest.mark.parametrize("eagerness", ["low", "medium", "high", "auto"])
def test_semantic_vad_times_the_turn_by_eagerness_and_echoes_itself(eagerness: str) -> None:
    config = _apply(Config(), _ga({"type": "semantic_vad", "eagerness": eagerness}))
    vad = config.turn_detection
    assert vad is not None
    assert config.stream_config().turn_detection is not None
    assert config.stream_config().turn_detection.silence_duration_ms == SEMANTIC_SILENCE_MS[eagerness]
    wire = config.to_wire("s")["audio"]["input"]["turn_detection"]
    assert wire["type"] == "semantic_vad" and wire["eagerness"] == eagerness


def test_semantic_vad_orders_eagerness_and_defaults_to_auto() -> None:
    assert SEMANTIC_SILENCE_MS["low"] > SEMANTIC_SILENCE_MS["medium"] > SEMANTIC_SILENCE_MS["high"]
    config = _apply(Config(), _ga({"type": "semantic_vad", "create_response": False}))
    assert config.turn_detection is not None
    assert config.turn_detection.eagerness == "auto" and config.turn_detection.create_response is False


def test_switching_back_to_server_vad_drops_the_semantic_timing() -> None:
    config = _apply(Config(), _ga({"type": "semantic_vad", "eagerness": "low"}))
    config = _apply(config, _ga({"type": "server_vad"}))
    assert config.turn_detection is not None
    assert config.turn_detection.eagerness is None
    assert config.turn_detection.silence_duration_ms == 500
    assert config.to_wire("s")["audio"]["input"]["turn_detection"]["type"] == "server_vad"


@pytest.mark.parametrize(
    ("detection", "code", "param"),
    [
        ({"type": "semantic_vad", "eagerness": "eager"}, "invalid_value", "eagerness"),
        ({"type": "semantic_vad", "create_response": "yes"}, "invalid_type", "create_response"),
        # A list is a wrong type: the decoder refuses it, as session.update always did.
        ({"type": "semantic_vad", "eagerness": []}, "invalid_type", "eagerness"),
        ({"type": "server_vad", "idle_timeout_ms": -1}, "invalid_value", "idle_timeout_ms"),
        ({"type": "server_vad", "idle_timeout_ms": 10**400}, "invalid_value", "idle_timeout_ms"),
        ({"type": "server_vad", "idle_timeout_ms": "5"}, "invalid_type", "idle_timeout_ms"),
        ({"type": "push_to_talk"}, "unsupported_turn_detection", "type"),
    ],
)
def test_bad_turn_detection_is_refused_and_leaves_the_config(
    detection: object, code: str, param: str
) -> None:
    before = Config()
    with pytest.raises(InvalidRequest) as caught:
        _apply(before, _ga(detection))
    assert caught.value.code == code
    assert caught.value.param == f"session.audio.input.turn_detection.{param}"
    assert before.turn_detection is not None and before.turn_detection.eagerness is None


def test_sample_rate_hz_names_the_pcm_rates_as_vllm_omni_clients_send_them() -> None:
    session = {
        "input_audio_format": "pcm16",
        "sample_rate_hz": 16_000,
        "audio": {"input": {"sample_rate_hz": 16_000}, "output": {"sample_rate_hz": 22_050}},
    }
    config = _apply(Config(), session)
    assert (config.input_format.rate, config.output_format.rate) == (16_000, 22_050)
    assert _apply(config, {"instructions": "x"}).input_format.rate == 16_000  # partial update


@pytest.mark.parametrize(
    ("session", "param"),
    [
        (
            {"sample_rate_hz": 16_000, "audio": {"input": {"sample_rate_hz": 24_000}}},
            "session.sample_rate_hz",
        ),
        (
            {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 24_000}, "sample_rate_hz": 16_000}}},
            "session.audio.input.sample_rate_hz",
        ),
        ({"sample_rate_hz": "16000"}, "session.sample_rate_hz"),
        ({"sample_rate_hz": 1}, "session.sample_rate_hz"),
        ({"input_audio_format": "g711_ulaw", "sample_rate_hz": 16_000}, "session.sample_rate_hz"),
    ],
)
def test_sample_rates_that_disagree_or_cannot_be_are_refused(session: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        _apply(Config(), session)
    assert refused.value.param == param


def test_noise_reduction_and_include_reach_the_model_and_an_update_is_partial() -> None:
    config = _apply(Config(), {"audio": {"input": {"noise_reduction": {"type": "near_field"}}}})
    assert config.stream_config().noise_reduction == "near_field"
    assert not config.stream_config().transcription_logprobs
    config = _apply(config, {"include": ["item.input_audio_transcription.logprobs"]})
    assert config.stream_config().transcription_logprobs
    assert config.stream_config().noise_reduction == "near_field"  # left out: kept
    config = _apply(config, {"input_audio_noise_reduction": {"type": "far_field"}})  # beta spelling
    assert config.stream_config().noise_reduction == "far_field"
    config = _apply(config, {"input_audio_noise_reduction": None, "include": None})
    assert config.stream_config().noise_reduction == ""
    assert not config.stream_config().transcription_logprobs


@pytest.mark.parametrize(
    ("session", "code", "param"),
    [
        ({"audio": {"input": {"noise_reduction": {"type": "studio"}}}}, "invalid_value", "type"),
        ({"audio": {"input": {"noise_reduction": {}}}}, "missing_required_parameter", "type"),
        ({"include": ["item.input_audio_transcription.logprobs", "x"]}, "invalid_value", "include[1]"),
    ],
)
def test_bad_noise_reduction_or_include_is_refused_and_leaves_the_config(
    session: dict[str, object], code: str, param: str
) -> None:
    before = Config(noise_reduction="far_field")
    with pytest.raises(InvalidRequest) as caught:
        _apply(before, session)
    assert caught.value.code == code and str(caught.value.param).endswith(param)


@pytest.mark.parametrize(
    ("session", "param"),
    [
        (
            {"audio": {"input": {"transcription": {"model": "whisper-1", "prompt": "x" * 1025}}}},
            "session.audio.input.transcription.prompt",
        ),
        (
            {"input_audio_transcription": {"model": "whisper-1", "prompt": "x" * 1025}},
            "session.input_audio_transcription.prompt",
        ),
    ],
)
def test_a_transcription_prompt_over_openais_1024_characters_is_refused(
    session: dict[str, object], param: str
) -> None:
    prompted = _apply(Config(), {"audio": {"input": {"transcription": {"prompt": "y" * 1024}}}})
    assert prompted.transcription_prompt == "y" * 1024  # the longest taken
    with pytest.raises(InvalidRequest) as caught:
        _apply(prompted, session)
    assert (caught.value.code, caught.value.param) == ("string_above_max_length", param)
    assert caught.value.message == (
        f"Invalid '{param}': string too long. Expected a string with maximum length 1024, "
        "but got a string with length 1025 instead."
    )
