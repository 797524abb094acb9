"""A voice session's configuration: parsed from ``session.update``, rendered as the session object.

OpenAI's GA shape nests audio settings (``audio.input.format``,
``audio.input.turn_detection``, ``audio.output.voice``); the beta shape kept
them flat (``input_audio_format``, ``turn_detection``, ``voice``,
``modalities``). Both are accepted; the GA shape is what the server sends back.
vllm-omni's duplex clients name PCM rates as ``sample_rate_hz`` (on the
session for input, under ``audio.input``/``audio.output``); these are honoured
too. An update is partial: fields not named keep their values. Parsing is pure and
all-or-nothing: a bad field raises ``InvalidRequest`` and the session keeps
its old configuration.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from livegen.models.voice import StreamConfig, TurnDetection
from livegen.protocol.audio import MAX_RATE, MIN_RATE, AudioFormat, Encoding, parse_format
from livegen.protocol.errors import INVALID_TYPE, INVALID_VALUE, UNSUPPORTED_TURN_DETECTION
from livegen.voice import tools as fn

#: ``semantic_vad`` has no end-of-turn model here: its eagerness picks how long a silence ends
#: the turn (OpenAI: "low" waits longer for the user to go on, "high" answers sooner).
SEMANTIC_SILENCE_MS = {"low": 1200, "medium": 700, "auto": 700, "high": 350}
#: OpenAI's ``noise_reduction.type`` values (``models/cascade/denoise.py`` says how each is tuned).
NOISE_REDUCTION_TYPES = ("near_field", "far_field")
#: The one ``include`` value: transcription events carry ``logprobs``.
LOGPROBS = "item.input_audio_transcription.logprobs"
#: The ``idle_timeout_ms`` livegen takes (the wire decoder checks the same range first).
IDLE_TIMEOUT_MS = (100, 3_600_000)


@dataclass(frozen=True)
class ServerVad:
    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    create_response: bool = True
    interrupt_response: bool = True
    idle_timeout_ms: int | None = None
    #: Set when the client asked for ``semantic_vad``: the same detector, timed by eagerness.
    eagerness: str | None = None

    def to_wire(self) -> dict[str, Any]:
        if self.eagerness is not None:
            return {
                "type": "semantic_vad",
                "eagerness": self.eagerness,
                "create_response": self.create_response,
                "interrupt_response": self.interrupt_response,
            }
        return {
            "type": "server_vad",
            "threshold": self.threshold,
            "prefix_padding_ms": self.prefix_padding_ms,
            "silence_duration_ms": self.silence_duration_ms,
            "create_response": self.create_response,
            "interrupt_response": self.interrupt_response,
            "idle_timeout_ms": self.idle_timeout_ms,
        }


@dataclass(frozen=True)
class Config:
    model: str = ""
    instructions: str = ""
    output_modalities: tuple[str, ...] = ("audio",)
    voice: str = "alloy"
    input_format: AudioFormat = field(default_factory=AudioFormat)
    output_format: AudioFormat = field(default_factory=AudioFormat)
    turn_detection: ServerVad | None = field(default_factory=ServerVad)
    transcription_model: str = ""
    tools: tuple[fn.Tool, ...] = ()
    tool_choice: fn.ToolChoice = "auto"
    #: ``truncation``: "auto", "disabled", or a retention ratio in (0, 1] (OpenAI's retention_ratio).
    truncation: str | float = "auto"
    #: ``audio.input.transcription``'s ISO-639-1 language and context prompt, for the recogniser.
    transcription_language: str = ""
    transcription_prompt: str = ""
    #: "realtime", or "transcription": audio in, transcripts out, no responses.
    session_type: str = "realtime"
    #: ``audio.input.noise_reduction.type`` ("near_field", "far_field"), or None: off.
    noise_reduction: str | None = None
    #: ``include``: extra fields asked for (``item.input_audio_transcription.logprobs``).
    include: tuple[str, ...] = ()

    @property
    def is_transcription(self) -> bool:
        return self.session_type == "transcription"

    def stream_config(self) -> StreamConfig:
        vad = self.turn_detection
        return StreamConfig(
            instructions=self.instructions,
            voice=self.voice,
            turn_detection=None
            if vad is None
            else TurnDetection(vad.threshold, vad.prefix_padding_ms, vad.silence_duration_ms),
            # A transcription session always transcribes: unnamed, the server's recogniser does.
            transcription_model=self.transcription_model or ("default" if self.is_transcription else ""),
            transcription_language=self.transcription_language,
            transcription_prompt=self.transcription_prompt,
            tools=() if self.tool_choice == "none" else tuple(t.to_chat() for t in self.tools),
            tool_choice=fn.chat_tool_choice(self.tool_choice),
            noise_reduction=self.noise_reduction or "",
            transcription_logprobs=LOGPROBS in self.include,
        )

    def _transcription_to_wire(self) -> dict[str, str] | None:
        if not self.transcription_model:
            return None
        fields = {"language": self.transcription_language, "prompt": self.transcription_prompt}
        return {"model": self.transcription_model, **{k: v for k, v in fields.items() if v}}

    def _noise_reduction_to_wire(self) -> dict[str, str] | None:
        return None if self.noise_reduction is None else {"type": self.noise_reduction}

    def to_wire(self, session_id: str) -> dict[str, Any]:
        if self.is_transcription:
            return self._transcription_session_to_wire(session_id)
        return {
            "id": session_id,
            "object": "realtime.session",
            "type": "realtime",
            "model": self.model,
            "instructions": self.instructions,
            "output_modalities": list(self.output_modalities),
            "audio": {
                "input": {
                    "format": self.input_format.to_wire(),
                    "turn_detection": None if self.turn_detection is None else self.turn_detection.to_wire(),
                    "transcription": self._transcription_to_wire(),
                    "noise_reduction": self._noise_reduction_to_wire(),
                },
                "output": {"format": self.output_format.to_wire(), "voice": self.voice, "speed": 1.0},
            },
            "tools": [t.to_wire() for t in self.tools],
            "tool_choice": fn.choice_to_wire(self.tool_choice),
            "max_output_tokens": "inf",
            "truncation": _truncation_to_wire(self.truncation),
            **({"include": list(self.include)} if self.include else {}),
        }

    def _transcription_session_to_wire(self, session_id: str) -> dict[str, Any]:
        """GA's transcription session: input audio settings only."""
        vad = self.turn_detection
        return {
            "id": session_id,
            "object": "realtime.transcription_session",
            "type": "transcription",
            "audio": {
                "input": {
                    "format": self.input_format.to_wire(),
                    "turn_detection": None if vad is None else vad.to_wire(),
                    "transcription": self._transcription_to_wire(),
                    "noise_reduction": self._noise_reduction_to_wire(),
                }
            },
            "include": list(self.include),
        }


def _expect(value: Any, kind: type | tuple[type, ...], param: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        detail = f"Invalid type for '{param}': expected a {names}, but got {type(value).__name__} instead."
        raise INVALID_TYPE.error(detail=detail, param=param)
    return value


def _modalities(value: Any, param: str) -> tuple[str, ...]:
    _expect(value, list, param)
    if not value or any(m not in ("audio", "text") for m in value):
        raise INVALID_VALUE.error(
            detail=f"{param} must list 'audio' and/or 'text', got {value!r}", param=param
        )
    # Audio output always carries its transcript, so ["text", "audio"] (beta) means audio.
    return ("audio",) if "audio" in value else ("text",)


def _turn_detection(value: Any, current: ServerVad | None, param: str) -> ServerVad | None:
    if value is None:
        return None
    _expect(value, dict, param)
    kind = value.get("type", "server_vad")
    if kind == "semantic_vad":
        return _semantic_vad(value, current, param)
    if kind != "server_vad":
        raise UNSUPPORTED_TURN_DETECTION.error(kind=kind, param=f"{param}.type")
    vad = current if current is not None and current.eagerness is None else ServerVad()
    updates: dict[str, Any] = {}
    if "threshold" in value:
        threshold = _expect(value["threshold"], (int, float), f"{param}.threshold")
        if not 0.0 <= threshold <= 1.0:
            raise INVALID_VALUE.error(
                detail=f"{param}.threshold must be in [0, 1]", param=f"{param}.threshold"
            )
        updates["threshold"] = float(threshold)
    for name in ("prefix_padding_ms", "silence_duration_ms"):
        if name in value:
            number = _expect(value[name], int, f"{param}.{name}")
            if not 0 <= number <= 10_000:
                raise INVALID_VALUE.error(
                    detail=f"{param}.{name} must be 0..10000 ms", param=f"{param}.{name}"
                )
            updates[name] = number
    for name in ("create_response", "interrupt_response"):
        if name in value:
            updates[name] = _expect(value[name], bool, f"{param}.{name}")
    if "idle_timeout_ms" in value:
        updates["idle_timeout_ms"] = _idle_timeout(value["idle_timeout_ms"], f"{param}.idle_timeout_ms")
    return replace(vad, **updates)


def _idle_timeout(value: Any, param: str) -> int | None:
    """None (off) or MIN..MAX ms: a negative one would answer at once, forever, with no input."""
    if value is None:
        return None
    number: int = _expect(value, int, param)
    low, high = IDLE_TIMEOUT_MS
    if not low <= number <= high:
        detail = f"Invalid value for '{param}': expected {low}..{high} ms, got {number}."
        raise INVALID_VALUE.error(detail=detail, param=param)
    return number


def _semantic_vad(value: dict[str, Any], current: ServerVad | None, param: str) -> ServerVad:
    eagerness = value.get("eagerness", current.eagerness if current and current.eagerness else "auto")
    if not isinstance(eagerness, str) or eagerness not in SEMANTIC_SILENCE_MS:
        detail = f"{param}.eagerness must be one of {', '.join(SEMANTIC_SILENCE_MS)}, got {eagerness!r}"
        raise INVALID_VALUE.error(detail=detail, param=f"{param}.eagerness")
    vad = ServerVad(eagerness=eagerness, silence_duration_ms=SEMANTIC_SILENCE_MS[eagerness])
    updates = {
        name: _expect(value[name], bool, f"{param}.{name}")
        for name in ("create_response", "interrupt_response")
        if name in value
    }
    return replace(vad, **updates)


def apply_update(config: Config, session: dict[str, Any]) -> Config:
    """``config`` with the fields of a ``session.update`` applied (GA or beta shape)."""
    updates: dict[str, Any] = {}
    if session.get("type", config.session_type) not in ("realtime", "transcription"):
        detail = f"session type {session.get('type')!r} is not supported; use 'realtime' or 'transcription'"
        raise INVALID_VALUE.error(detail=detail, param="session.type")
    if "type" in session:
        updates["session_type"] = session["type"]
    if session.get("model") not in (None, ""):
        # Whether the session may still switch is the session's call (voice/session.py).
        updates["model"] = _expect(session["model"], str, "session.model")
    if "instructions" in session:
        updates["instructions"] = _expect(session["instructions"], str, "session.instructions")
    for key in ("output_modalities", "modalities"):
        if key in session:
            updates["output_modalities"] = _modalities(session[key], f"session.{key}")
    audio = _expect(session.get("audio", {}), dict, "session.audio")
    audio_in = _expect(audio.get("input", {}), dict, "session.audio.input")
    audio_out = _expect(audio.get("output", {}), dict, "session.audio.output")
    for param, value in (
        ("session.audio.input.format", audio_in.get("format")),
        ("session.input_audio_format", session.get("input_audio_format")),
    ):
        if value is not None:
            updates["input_format"] = parse_format(value, param)
    for param, value in (
        ("session.audio.output.format", audio_out.get("format")),
        ("session.output_audio_format", session.get("output_audio_format")),
    ):
        if value is not None:
            updates["output_format"] = parse_format(value, param)
    input_rates = (("session.sample_rate_hz", session), ("session.audio.input.sample_rate_hz", audio_in))
    output_rates = (("session.audio.output.sample_rate_hz", audio_out),)
    for name, sources, explicit in (
        ("input_format", input_rates, audio_in.get("format")),
        ("output_format", output_rates, audio_out.get("format")),
    ):
        rate = _sample_rate(sources, explicit)
        if rate is not None:
            fmt = updates.get(name, getattr(config, name))
            updates[name] = _with_rate(fmt, rate, sources[0][0])
    for param, source in (
        ("session.audio.input.turn_detection", audio_in),
        ("session.turn_detection", session),
    ):
        if "turn_detection" in source:
            updates["turn_detection"] = _turn_detection(
                source["turn_detection"], config.turn_detection, param
            )
    for param, value in (
        ("session.audio.output.voice", audio_out.get("voice")),
        ("session.voice", session.get("voice")),
    ):
        if value is not None:
            updates["voice"] = _expect(value, str, param)
    for param, value in (
        ("session.audio.input.transcription", audio_in.get("transcription")),
        ("session.input_audio_transcription", session.get("input_audio_transcription")),
    ):
        if value is not None:
            transcription = _expect(value, dict, param)
            updates["transcription_model"] = str(transcription.get("model") or "")
            updates["transcription_language"] = str(transcription.get("language") or "")
            updates["transcription_prompt"] = str(transcription.get("prompt") or "")
    updates.update(_tool_updates(config, session))
    updates.update(_hearing_updates(session, audio_in))
    if "truncation" in session:
        updates["truncation"] = parse_truncation(session["truncation"], "session.truncation")
    return replace(config, **updates)


def _hearing_updates(session: dict[str, Any], audio_in: dict[str, Any]) -> dict[str, Any]:
    """``noise_reduction`` (GA and beta spellings) and ``include``."""
    updates: dict[str, Any] = {}
    for param, source, key in (
        ("session.audio.input.noise_reduction", audio_in, "noise_reduction"),
        ("session.input_audio_noise_reduction", session, "input_audio_noise_reduction"),
    ):
        if key in source:
            updates["noise_reduction"] = _noise_reduction(source[key], param)
    if "include" in session:
        include = session["include"] or []
        _expect(include, list, "session.include")
        if any(name != LOGPROBS for name in include):
            detail = f"session.include may only name {LOGPROBS!r}, got {include!r}"
            raise INVALID_VALUE.error(detail=detail, param="session.include")
        updates["include"] = tuple(dict.fromkeys(include))
    return updates


def _noise_reduction(value: Any, param: str) -> str | None:
    if value is None:
        return None
    _expect(value, dict, param)
    kind = value.get("type")
    if kind not in NOISE_REDUCTION_TYPES:
        detail = f"{param}.type must be one of {', '.join(NOISE_REDUCTION_TYPES)}, got {kind!r}"
        raise INVALID_VALUE.error(detail=detail, param=f"{param}.type")
    return str(kind)


def _tool_updates(config: Config, session: dict[str, Any]) -> dict[str, Any]:
    tools = fn.parse_tools(session["tools"], "session.tools") if "tools" in session else config.tools
    if "tool_choice" in session:
        choice = fn.parse_tool_choice(session["tool_choice"], tools, "session.tool_choice")
    else:
        choice = config.tool_choice
        fn.check_choice(choice, tools, "session.tool_choice")
    return {"tools": tools, "tool_choice": choice}


def parse_truncation(value: Any, param: str) -> str | float:
    """OpenAI's ``truncation``: "auto", "disabled", or a ``retention_ratio`` object."""
    if value in ("auto", "disabled"):
        return str(value)
    if isinstance(value, dict) and value.get("type") == "retention_ratio":
        ratio = value.get("retention_ratio")
        if isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and 0.0 < ratio <= 1.0:
            return float(ratio)
        detail = f"{param}.retention_ratio must be a number in (0, 1], got {ratio!r}"
        raise INVALID_VALUE.error(detail=detail, param=f"{param}.retention_ratio")
    detail = f"{param} must be 'auto', 'disabled' or a retention_ratio object, got {value!r}"
    raise INVALID_VALUE.error(detail=detail, param=param)


def _truncation_to_wire(value: str | float) -> Any:
    return value if isinstance(value, str) else {"type": "retention_ratio", "retention_ratio": value}


def _sample_rate(sources: tuple[tuple[str, dict[str, Any]], ...], explicit: Any) -> int | None:
    """The ``sample_rate_hz`` named by any of ``sources`` (they must agree, also with a GA format
    object's explicit ``rate``), or None."""
    rates: dict[str, Any] = {p: src["sample_rate_hz"] for p, src in sources if "sample_rate_hz" in src}
    if isinstance(explicit, dict) and "rate" in explicit and rates:
        rates["format.rate"] = explicit["rate"]
    for param, rate in rates.items():
        if not isinstance(rate, int) or isinstance(rate, bool) or not MIN_RATE <= rate <= MAX_RATE:
            detail = f"{param} must be an integer from {MIN_RATE} to {MAX_RATE} Hz, got {rate!r}"
            raise INVALID_VALUE.error(detail=detail, param=param)
    if len(set(rates.values())) > 1:
        raise INVALID_VALUE.error(detail=f"the sample rates named disagree: {rates}", param=next(iter(rates)))
    return next(iter(rates.values()), None)


def _with_rate(fmt: AudioFormat, rate: int, param: str) -> AudioFormat:
    if fmt.encoding is Encoding.PCM:
        return replace(fmt, rate=rate)
    if rate != fmt.rate:
        detail = f"{param} is {rate} Hz, but {fmt.encoding.value} is always {fmt.rate} Hz"
        raise INVALID_VALUE.error(detail=detail, param=param)
    return fmt
