"""``session.update`` payloads, good and bad, at every level of the session object, and how each ends.

Shared by ``test_session_update_table.py`` (which checks them against the recorded
outcomes) and by the recorder (``python tests/protocol/session_update_cases.py``),
which wrote ``data/session_update_table.json`` from the core that parsed the
session object as a dict. A case is a list of updates applied in order to a
fresh configuration; its outcome is the session object the last one leaves,
or the (code, message, param) of the first refusal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from livegen.errors import RemoteProtocolError
from livegen.protocol import realtime as wire
from livegen.voice.config import Config, apply_update

TABLE = Path(__file__).parent / "data" / "session_update_table.json"

_PCM = {"type": "audio/pcm", "rate": 24_000}
_TOOL = {"type": "function", "name": "weather", "description": "d", "parameters": {"type": "object"}}
_BAD = [None, 5, 1.5, True, "x", [], {}, 10**400]


def _ga_in(**fields: Any) -> dict[str, Any]:
    return {"audio": {"input": fields}}


def _ga_out(**fields: Any) -> dict[str, Any]:
    return {"audio": {"output": fields}}


def _kinds(path: str, make: Any) -> dict[str, list[dict[str, Any]]]:
    """One case per bad value of one field."""
    return {
        f"{path}={json.dumps(v) if not isinstance(v, int) or abs(v) < 2**64 else 'huge'}": [make(v)]
        for v in _BAD
    }


def _top(name: str) -> dict[str, list[dict[str, Any]]]:
    return _kinds(f"session.{name}", lambda v: {name: v})


def _vad(name: str, kind: str = "server_vad") -> dict[str, list[dict[str, Any]]]:
    return _kinds(f"{kind}.{name}", lambda v: _ga_in(turn_detection={"type": kind, name: v}))


CASES: dict[str, list[dict[str, Any]]] = {
    "empty": [{}],
    "unknown field": [{"colour": "blue", "audio": {"shape": 1, "input": {"x": 1}}}],
    "type realtime": [{"type": "realtime"}],
    "type transcription": [{"type": "transcription"}],
    "model": [{"model": "other"}],
    "model empty": [{"model": ""}],
    "instructions": [{"instructions": "be brief"}],
    "output_modalities text": [{"output_modalities": ["text"]}],
    "modalities beta both": [{"modalities": ["text", "audio"]}],
    "modalities empty": [{"modalities": []}],
    "modalities bad": [{"output_modalities": ["video"]}],
    "voice ga": [_ga_out(voice="verse")],
    "voice beta": [{"voice": "ash"}],
    "voice both": [{"voice": "ash", **_ga_out(voice="verse")}],
    "voice null": [{"voice": None}],
    "formats ga": [
        {
            "audio": {
                "input": {"format": {"type": "audio/pcm", "rate": 16_000}},
                "output": {"format": "audio/pcmu"},
            }
        }
    ],
    "format ga string": [_ga_in(format="audio/pcma")],
    "format ga no type": [_ga_in(format={"rate": 16_000})],
    "format ga null type": [_ga_in(format={"type": None})],
    "format ga null rate": [_ga_in(format={"type": "audio/pcm", "rate": None})],
    "format ga bad rate": [_ga_in(format={"type": "audio/pcm", "rate": 7})],
    "format ga bool rate": [_ga_in(format={"type": "audio/pcm", "rate": True})],
    "format ga opus": [_ga_out(format={"type": "audio/opus"})],
    "format null": [_ga_in(format=None)],
    "formats beta": [{"input_audio_format": "g711_ulaw", "output_audio_format": "pcm16"}],
    "format beta unknown": [{"input_audio_format": "mp3"}],
    "format beta object": [{"output_audio_format": {"type": "audio/pcmu"}}],
    "formats both dialects": [{"input_audio_format": "g711_alaw", **_ga_in(format=_PCM)}],
    "rate duplex": [
        {
            "sample_rate_hz": 16_000,
            "audio": {"input": {"sample_rate_hz": 16_000}, "output": {"sample_rate_hz": 22_050}},
        }
    ],
    "rate duplex alone": [{"sample_rate_hz": 8_000}],
    "rate disagree": [{"sample_rate_hz": 16_000, "audio": {"input": {"sample_rate_hz": 24_000}}}],
    "rate vs format": [_ga_in(format={"type": "audio/pcm", "rate": 24_000}, sample_rate_hz=16_000)],
    "rate agrees format": [_ga_in(format={"type": "audio/pcm", "rate": 16_000}, sample_rate_hz=16_000)],
    "rate format null rate": [_ga_in(format={"type": "audio/pcm", "rate": None}, sample_rate_hz=16_000)],
    "rate string": [{"sample_rate_hz": "16000"}],
    "rate low": [{"sample_rate_hz": 1}],
    "rate null": [{"sample_rate_hz": None}],
    "rate bool": [_ga_out(sample_rate_hz=True)],
    "rate g711": [{"input_audio_format": "g711_ulaw", "sample_rate_hz": 16_000}],
    "rate g711 8k": [{"input_audio_format": "g711_ulaw", "sample_rate_hz": 8_000}],
    "rate output g711": [_ga_out(format={"type": "audio/pcmu"}, sample_rate_hz=16_000)],
    "rate kept by partial": [{"sample_rate_hz": 16_000}, {"instructions": "x"}],
    "rate on earlier format": [{"input_audio_format": "pcm16"}, {"sample_rate_hz": 44_100}],
    "vad ga": [
        _ga_in(
            turn_detection={
                "type": "server_vad",
                "threshold": 0.7,
                "prefix_padding_ms": 100,
                "silence_duration_ms": 900,
                "create_response": False,
                "interrupt_response": False,
                "idle_timeout_ms": 5000,
            }
        )
    ],
    "vad beta partial": [
        _ga_in(turn_detection={"type": "server_vad", "silence_duration_ms": 900}),
        {"turn_detection": {"threshold": 0.8}},
    ],
    "vad off ga": [_ga_in(turn_detection=None)],
    "vad off beta": [{"turn_detection": None}],
    "vad absent keeps": [_ga_in(turn_detection=None), {"instructions": "x"}],
    "vad both dialects": [
        {"turn_detection": {"threshold": 0.2}, **_ga_in(turn_detection={"threshold": 0.9})}
    ],
    "vad no type": [_ga_in(turn_detection={"silence_duration_ms": 10})],
    "vad int threshold": [_ga_in(turn_detection={"threshold": 1})],
    "vad threshold high": [_ga_in(turn_detection={"threshold": 1.5})],
    "vad ms high": [_ga_in(turn_detection={"prefix_padding_ms": 10_001})],
    "vad ms negative": [_ga_in(turn_detection={"silence_duration_ms": -1})],
    "vad idle null": [
        _ga_in(turn_detection={"idle_timeout_ms": 5000}),
        _ga_in(turn_detection={"idle_timeout_ms": None}),
    ],
    "vad idle low": [_ga_in(turn_detection={"idle_timeout_ms": 99})],
    "vad push to talk": [_ga_in(turn_detection={"type": "push_to_talk"})],
    "vad beta push to talk": [{"turn_detection": {"type": "none"}}],
    "semantic": [
        _ga_in(turn_detection={"type": "semantic_vad", "eagerness": "low", "create_response": False})
    ],
    "semantic default": [_ga_in(turn_detection={"type": "semantic_vad"})],
    "semantic keeps eagerness": [
        _ga_in(turn_detection={"type": "semantic_vad", "eagerness": "high"}),
        _ga_in(turn_detection={"type": "semantic_vad", "interrupt_response": False}),
    ],
    "semantic ignores threshold": [_ga_in(turn_detection={"type": "semantic_vad", "threshold": 0.9})],
    "semantic then server": [
        _ga_in(turn_detection={"type": "semantic_vad", "eagerness": "low"}),
        _ga_in(turn_detection={"type": "server_vad"}),
    ],
    "semantic then beta partial": [
        _ga_in(turn_detection={"type": "semantic_vad", "eagerness": "low"}),
        {"turn_detection": {"threshold": 0.3}},
    ],
    "semantic eager": [_ga_in(turn_detection={"type": "semantic_vad", "eagerness": "eager"})],
    "semantic eagerness list": [_ga_in(turn_detection={"type": "semantic_vad", "eagerness": []})],
    "vad off then semantic": [{"turn_detection": None}, _ga_in(turn_detection={"type": "semantic_vad"})],
    "transcription ga": [_ga_in(transcription={"model": "whisper-1", "language": "en", "prompt": "names"})],
    "transcription beta": [{"input_audio_transcription": {"model": "gpt-4o-transcribe"}}],
    "transcription prompt too long": [_ga_in(transcription={"model": "whisper-1", "prompt": "n" * 1025})],
    "transcription empty": [_ga_in(transcription={})],
    "transcription null model": [_ga_in(transcription={"model": None, "language": None})],
    "transcription off": [_ga_in(transcription={"model": "whisper-1"}), _ga_in(transcription=None)],
    "transcription both dialects": [
        {"input_audio_transcription": {"model": "b"}, **_ga_in(transcription={"model": "a"})}
    ],
    "transcription session": [
        {"type": "transcription", **_ga_in(transcription={"model": "whisper-1"}, turn_detection=None)}
    ],
    "transcription then realtime": [{"type": "transcription"}, {"type": "realtime"}],
    "type translation": [{"type": "translation"}],
    "tools": [{"tools": [_TOOL], "tool_choice": "required"}],
    "tools named choice": [{"tools": [_TOOL], "tool_choice": {"type": "function", "name": "weather"}}],
    "tools chat choice": [
        {"tools": [_TOOL], "tool_choice": {"type": "function", "function": {"name": "weather"}}}
    ],
    "tools choice unknown": [{"tools": [_TOOL], "tool_choice": {"type": "function", "name": "other"}}],
    "tools choice bad": [{"tool_choice": "sometimes"}],
    "tools dropped under choice": [
        {"tools": [_TOOL], "tool_choice": {"type": "function", "name": "weather"}},
        {"tools": []},
    ],
    "tools bad entry": [{"tools": [5]}],
    "tools bad type": [{"tools": [{"type": "code", "name": "x"}]}],
    "tools bad name": [{"tools": [{"type": "function", "name": "a b"}]}],
    "tools twice": [{"tools": [_TOOL, _TOOL]}],
    "tools entry null": [{"tools": [None]}],
    "truncation disabled": [{"truncation": "disabled"}],
    "truncation ratio": [{"truncation": {"type": "retention_ratio", "retention_ratio": 0.5}}],
    "truncation ratio int": [{"truncation": {"type": "retention_ratio", "retention_ratio": 1}}],
    "truncation ratio zero": [{"truncation": {"type": "retention_ratio", "retention_ratio": 0}}],
    "truncation ratio bool": [{"truncation": {"type": "retention_ratio", "retention_ratio": True}}],
    "truncation ratio missing": [{"truncation": {"type": "retention_ratio"}}],
    "truncation other type": [{"truncation": {"type": "tokens"}}],
    "temperature": [{"temperature": 0.6, "max_response_output_tokens": "inf", "max_output_tokens": 100}],
    "max tokens bad": [{"max_output_tokens": "lots"}],
    "noise_reduction ga": [_ga_in(noise_reduction={"type": "near_field"})],
    "noise_reduction ga far": [_ga_in(noise_reduction={"type": "far_field"}), {"instructions": "x"}],
    "noise_reduction ga off": [_ga_in(noise_reduction={"type": "near_field"}), _ga_in(noise_reduction=None)],
    "noise_reduction ga unknown type": [_ga_in(noise_reduction={"type": "studio"})],
    "noise_reduction ga no type": [_ga_in(noise_reduction={})],
    "noise_reduction beta": [{"input_audio_noise_reduction": {"type": "far_field"}}],
    "noise_reduction beta off": [{"input_audio_noise_reduction": None}],
    "noise_reduction beta unknown type": [{"input_audio_noise_reduction": {"type": "studio"}}],
    "noise_reduction transcription": [
        {"type": "transcription", **_ga_in(noise_reduction={"type": "near_field"})}
    ],
    "include logprobs": [{"include": ["item.input_audio_transcription.logprobs"]}],
    "include twice": [{"include": ["item.input_audio_transcription.logprobs"] * 2}],
    "include null": [{"include": ["item.input_audio_transcription.logprobs"]}, {"include": None}],
    "include empty": [{"include": []}],
    "include other": [{"include": ["item.content"]}],
    "include transcription": [
        {"type": "transcription", "include": ["item.input_audio_transcription.logprobs"]}
    ],
    "reasoning effort": [{"reasoning": {"effort": "low"}}],
    "reasoning effort xhigh then null": [{"reasoning": {"effort": "xhigh"}}, {"reasoning": None}],
    "reasoning effort kept": [{"reasoning": {"effort": "minimal"}}, {"instructions": "x"}],
    "reasoning empty": [{"reasoning": {}}],
    "reasoning effort unknown": [{"reasoning": {"effort": "maximal"}}],
    "transcription keywords": [_ga_in(transcription={"model": "m", "keywords": ["Siobhan", " ", "Helm"]})],
    "transcription keywords too long": [_ga_in(transcription={"model": "m", "keywords": ["x" * 1025]})],
    "transcription keywords and prompt too long": [
        _ga_in(transcription={"model": "m", "prompt": "p" * 1000, "keywords": ["x" * 30]})
    ],
    "transcription delay": [_ga_in(transcription={"model": "m", "delay": "minimal"})],
    "transcription delay unknown": [_ga_in(transcription={"model": "m", "delay": "slow"})],
    "transcription delay kept by transcription": [
        {"type": "transcription", **_ga_in(transcription={"model": "m", "delay": "xhigh", "keywords": ["a"]})}
    ],
    "two bad fields": [{"instructions": 5, "modalities": "audio"}],
    "bad then semantic error": [{"truncation": "never", "output_modalities": []}],
    "type error beats value error": [{"output_modalities": [], "voice": 5}],
    **_top("type"),
    **_top("model"),
    **_top("instructions"),
    **_top("output_modalities"),
    **_top("modalities"),
    **_top("voice"),
    **_top("audio"),
    **_top("input_audio_format"),
    **_top("output_audio_format"),
    **_top("turn_detection"),
    **_top("input_audio_transcription"),
    **_top("tools"),
    **_top("tool_choice"),
    **_top("truncation"),
    **_top("temperature"),
    **_top("include"),
    **_top("input_audio_noise_reduction"),
    **_top("reasoning"),
    **_kinds("reasoning.effort", lambda v: {"reasoning": {"effort": v}}),
    **_kinds("audio.input", lambda v: {"audio": {"input": v}}),
    **_kinds("audio.output", lambda v: {"audio": {"output": v}}),
    **_kinds("audio.input.format", lambda v: _ga_in(format=v)),
    **_kinds("audio.input.format.type", lambda v: _ga_in(format={"type": v})),
    **_kinds("audio.input.format.rate", lambda v: _ga_in(format={"type": "audio/pcm", "rate": v})),
    **_kinds("audio.output.format", lambda v: _ga_out(format=v)),
    **_kinds("audio.output.voice", lambda v: _ga_out(voice=v)),
    **_kinds("audio.output.speed", lambda v: _ga_out(speed=v)),
    **_kinds("audio.input.turn_detection", lambda v: _ga_in(turn_detection=v)),
    **_kinds("audio.input.transcription", lambda v: _ga_in(transcription=v)),
    **_kinds("audio.input.transcription.model", lambda v: _ga_in(transcription={"model": v})),
    **_kinds(
        "audio.input.transcription.language", lambda v: _ga_in(transcription={"model": "m", "language": v})
    ),
    **_kinds("audio.input.transcription.prompt", lambda v: _ga_in(transcription={"model": "m", "prompt": v})),
    **_kinds(
        "audio.input.transcription.keywords", lambda v: _ga_in(transcription={"model": "m", "keywords": v})
    ),
    **_kinds(
        "audio.input.transcription.keywords[0]",
        lambda v: _ga_in(transcription={"model": "m", "keywords": [v]}),
    ),
    **_kinds("audio.input.transcription.delay", lambda v: _ga_in(transcription={"model": "m", "delay": v})),
    **_kinds("audio.input.noise_reduction", lambda v: _ga_in(noise_reduction=v)),
    **_kinds("audio.input.noise_reduction.type", lambda v: _ga_in(noise_reduction={"type": v})),
    **_kinds("session.sample_rate_hz", lambda v: {"sample_rate_hz": v}),
    **_kinds("audio.input.sample_rate_hz", lambda v: _ga_in(sample_rate_hz=v)),
    **_kinds("audio.output.sample_rate_hz", lambda v: _ga_out(sample_rate_hz=v)),
    **_kinds(
        "truncation.retention_ratio",
        lambda v: {"truncation": {"type": "retention_ratio", "retention_ratio": v}},
    ),
    **_kinds("truncation.type", lambda v: {"truncation": {"type": v}}),
    **_kinds("beta.turn_detection.threshold", lambda v: {"turn_detection": {"threshold": v}}),
    **_vad("type"),
    **_vad("threshold"),
    **_vad("prefix_padding_ms"),
    **_vad("silence_duration_ms"),
    **_vad("create_response"),
    **_vad("interrupt_response"),
    **_vad("idle_timeout_ms"),
    **_vad("eagerness", "semantic_vad"),
    **_vad("create_response", "semantic_vad"),
    **_vad("interrupt_response", "semantic_vad"),
    **_vad("threshold", "semantic_vad"),
    **_kinds("session", lambda v: v),
}

#: Cases sent as beta's ``transcription_session.update`` (the session becomes a transcription one).
TRANSCRIPTION_CASES: dict[str, list[dict[str, Any]]] = {
    "beta transcription session": [
        {"input_audio_transcription": {"model": "whisper-1"}, "turn_detection": None}
    ],
    "beta transcription noise": [
        {
            "input_audio_noise_reduction": {"type": "near_field"},
            "include": ["item.input_audio_transcription.logprobs"],
        }
    ],
    "beta transcription type wins": [{"type": "realtime"}],
    "beta transcription bad": [{"input_audio_format": 5}],
}


def _error(error: RemoteProtocolError) -> dict[str, Any]:
    return {"error": [error.code, error.message, error.param]}


def outcome(updates: list[Any], kind: str = "session.update") -> dict[str, Any]:
    """The session object ``updates`` leave, each decoded from its JSON text; or the first refusal."""
    config = Config(model="m")
    try:
        for update in updates:
            event = wire.decode(json.dumps({"type": kind, "session": update}))
            assert isinstance(event, wire.SessionUpdate)
            config = apply_update(config, event.session)
    except RemoteProtocolError as error:
        return _error(error)
    return {"session": config.to_wire("sess_table")}


def outcomes() -> dict[str, dict[str, Any]]:
    table = {name: outcome(updates) for name, updates in CASES.items()}
    beta = "transcription_session.update"
    table.update({name: outcome(updates, beta) for name, updates in TRANSCRIPTION_CASES.items()})
    return table


if __name__ == "__main__":  # the recorder
    TABLE.write_text(json.dumps(outcomes(), indent=1, sort_keys=True) + "\n")
    print(f"{TABLE}: {len(CASES) + len(TRANSCRIPTION_CASES)} cases")
