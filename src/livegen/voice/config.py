"""A voice session's configuration: a ``session.update`` applied to it, rendered as the session object.

The update arrives decoded (``protocol/realtime/fields.py``'s ``SessionShape``:
every field typed, and ``UNSET`` where the client left it out). OpenAI's GA
shape nests audio settings (``audio.input.format``,
``audio.input.turn_detection``, ``audio.output.voice``); the beta shape kept
them flat (``input_audio_format``, ``turn_detection``, ``voice``,
``modalities``). Both are accepted; the GA shape is what the server sends back.
vllm-omni's duplex clients name PCM rates as ``sample_rate_hz`` (on the
session for input, under ``audio.input``/``audio.output``); these are honoured
too. An update is partial: fields left out keep their values, and a null says
what null means for that field (``turn_detection: null`` turns turn detection
off). What a value means may depend on the session (a named ``tool_choice`` on
its tools, a rate on its format), so it is checked here, in a fixed order (a
payload with two mistakes is refused for the same one every time). Applying is
pure and all-or-nothing: a bad field raises ``InvalidRequest`` and the session
keeps its old configuration.

This module owns ``Config`` (what the session is set to, rendered as its
session object) and the order an update is applied in; two parts with rules of
their own are apart: ``formats.py`` (the audio formats and sample rates, in
their several spellings) and ``turn_detection.py`` (``ServerVad`` and its
bounds). ``checks.py`` words the mistakes they share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeGuard, TypeVar

from msgspec import UNSET, UnsetType

from livegen.models.voice import McpServer, StreamConfig, TurnDetection, is_openai_transcription_model
from livegen.protocol.audio import (
    AudioFormat,
)
from livegen.protocol.errors import (
    INVALID_TYPE,
    INVALID_VALUE,
    MISSING_REQUIRED_PARAMETER,
    STRING_ABOVE_MAX_LENGTH,
)
from livegen.protocol.realtime.fields import (
    AudioInputShape,
    AudioOutputShape,
    AudioShape,
    NoiseReductionShape,
    ReasoningShape,
    SessionShape,
    TranscriptionShape,
    parse_truncation,
)
from livegen.protocol.realtime.server import as_dict
from livegen.protocol.realtime.session import (
    AnySessionObject,
    AudioInputObject,
    AudioOutputObject,
    NoiseReductionObject,
    ReasoningObject,
    SessionAudio,
    SessionObject,
    TranscriptionAudio,
    TranscriptionObject,
    TranscriptionSessionObject,
    format_object,
)
from livegen.voice import tools as fn
from livegen.voice.checks import expect, one_of
from livegen.voice.formats import format_updates
from livegen.voice.mcp_tools import McpTool
from livegen.voice.settings import REALTIME_VOICES
from livegen.voice.turn_detection import ServerVad, turn_detection

T = TypeVar("T")

#: OpenAI's ``noise_reduction.type`` values (``models/cascade/denoise.py`` says how each is tuned).
NOISE_REDUCTION_TYPES = ("near_field", "far_field")
#: The one ``include`` value: transcription events carry ``logprobs``.
LOGPROBS = "item.input_audio_transcription.logprobs"
#: The longest transcription ``prompt`` OpenAI takes, in characters. Whisper reads only the last
#: 224 tokens of it anyway (``models/cascade/asr.py`` keeps fewer); a longer one would only cost
#: the recogniser time to tokenise.
MAX_TRANSCRIPTION_PROMPT_CHARS = 1024
#: OpenAI's ``reasoning.effort`` values. Effort is a hint to a reasoning model, passed on as chat
#: completions' ``reasoning_effort``; the built-in responder (no ``--llm-base-url``) does not
#: reason, so any effort is already met there: it is accepted and echoed (docs/voice-protocol.md).
REASONING_EFFORTS = ("minimal", "low", "medium", "high", "xhigh")
#: OpenAI's ``transcription.delay`` values (``models/cascade/captions.py`` maps each to a step).
TRANSCRIPTION_DELAYS = ("minimal", "low", "medium", "high", "xhigh")


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
    #: The session's remote MCP servers (``{"type": "mcp"}`` tools), as parsed ...
    mcp_tools: tuple[McpTool, ...] = ()
    #: ... and as the model is given them, each with its ``mcp_list_tools`` item (the session
    #: gives each new server an item id: ``voice/mcp.py``).
    mcp_servers: tuple[McpServer, ...] = ()
    #: ``truncation``: "auto", "disabled", or a retention ratio in (0, 1] (OpenAI's retention_ratio).
    truncation: str | float = "auto"
    #: ``audio.input.transcription``'s ISO-639-1 language and context prompt, for the recogniser.
    transcription_language: str = ""
    transcription_prompt: str = ""
    #: ``transcription.keywords``: words that steer the recogniser (added to its prompt).
    transcription_keywords: tuple[str, ...] = ()
    #: ``transcription.delay``: how often live captions are cut ("" the default step).
    transcription_delay: str = ""
    #: "realtime", or "transcription": audio in, transcripts out, no responses.
    session_type: str = "realtime"
    #: ``audio.input.noise_reduction.type`` ("near_field", "far_field"), or None: off.
    noise_reduction: str | None = None
    #: ``include``: extra fields asked for (``item.input_audio_transcription.logprobs``).
    include: tuple[str, ...] = ()
    #: The transport fixes the audio formats (a WebRTC call's Opus track is decoded to and encoded
    #: from PCM16 at 24 kHz): a ``session.update`` that changes one is refused, never half-honoured.
    formats_fixed: bool = False
    #: ``reasoning.effort`` (one of ``REASONING_EFFORTS``), or None: the language model's own.
    reasoning_effort: str | None = None

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
            else TurnDetection(vad.threshold, vad.prefix_padding_ms, vad.silence_duration_ms, vad.eagerness),
            # A transcription session always transcribes: unnamed, the server's recogniser does.
            transcription_model=self.transcription_model or ("default" if self.is_transcription else ""),
            transcription_language=self.transcription_language,
            transcription_prompt=recogniser_prompt(self.transcription_prompt, self.transcription_keywords),
            transcription_delay=self.transcription_delay,
            tools=() if self.tool_choice == "none" else tuple(t.to_chat() for t in self.tools),
            tool_choice=fn.chat_tool_choice(self.tool_choice),
            noise_reduction=self.noise_reduction or "",
            transcription_logprobs=LOGPROBS in self.include,
            reasoning_effort=self.reasoning_effort,
            mcp_servers=self.mcp_servers,
        )

    def _transcription_object(self) -> TranscriptionObject | None:
        if not self.transcription_model:
            return None
        transcription = TranscriptionObject(self.transcription_model)
        if self.transcription_language:
            transcription.language = self.transcription_language
        if self.transcription_prompt:
            transcription.prompt = self.transcription_prompt
        if self.transcription_keywords:
            transcription.keywords = list(self.transcription_keywords)
        if self.transcription_delay:
            transcription.delay = self.transcription_delay
        return transcription

    def _input_object(self) -> AudioInputObject:
        vad = self.turn_detection
        return AudioInputObject(
            format_object(self.input_format),
            None if vad is None else vad.to_object(),
            self._transcription_object(),
            None if self.noise_reduction is None else NoiseReductionObject(self.noise_reduction),
        )

    def to_object(self, session_id: str) -> AnySessionObject:
        """The session object (``session.created``, ``session.updated``)."""
        if self.is_transcription:  # GA's transcription session: input audio settings only
            audio = TranscriptionAudio(self._input_object())
            return TranscriptionSessionObject(id=session_id, audio=audio, include=list(self.include))
        output = AudioOutputObject(format_object(self.output_format), self.voice)
        return SessionObject(
            id=session_id,
            model=self.model,
            instructions=self.instructions,
            output_modalities=list(self.output_modalities),
            audio=SessionAudio(self._input_object(), output),
            tools=[*(t.to_wire() for t in self.tools), *(m.to_wire() for m in self.mcp_tools)],
            tool_choice=fn.choice_to_wire(self.tool_choice),
            truncation=_truncation_to_wire(self.truncation),
            include=list(self.include) if self.include else UNSET,
            reasoning=UNSET if self.reasoning_effort is None else ReasoningObject(self.reasoning_effort),
        )

    def to_wire(self, session_id: str) -> dict[str, Any]:
        return as_dict(self.to_object(session_id))


def _object(value: T | None, param: str) -> T:
    """A nested object the update names: null is refused (the same words as when it was a dict)."""
    if value is None:
        detail = f"Invalid type for '{param}': expected a dict, but got NoneType instead."
        raise INVALID_TYPE.error(detail=detail, param=param)
    return value


def _is_set(value: T | UnsetType | None) -> TypeGuard[T]:
    """Whether an update names a value (neither left out nor null)."""
    return value is not UNSET and value is not None


def _modalities(value: list[str] | None, param: str) -> tuple[str, ...]:
    expect(value, list, param)
    assert value is not None
    if not value or any(m not in ("audio", "text") for m in value):
        raise INVALID_VALUE.error(
            detail=f"{param} must list 'audio' and/or 'text', got {value!r}", param=param
        )
    # Audio output always carries its transcript, so ["text", "audio"] (beta) means audio.
    return ("audio",) if "audio" in value else ("text",)


def apply_update(config: Config, session: SessionShape) -> Config:
    """``config`` with the fields of a ``session.update`` applied (GA or beta shape), in the order
    the session has always checked them, so that a payload with two mistakes names the same one."""
    updates = _identity_updates(config, session)
    audio_in, audio_out = _audio(session.audio)
    updates.update(format_updates(config, session, audio_in, audio_out))
    for param, detection in (
        ("session.audio.input.turn_detection", audio_in.turn_detection),
        ("session.turn_detection", session.turn_detection),
    ):
        if detection is not UNSET:
            updates["turn_detection"] = turn_detection(detection, config.turn_detection, param)
    for voice in (audio_out.voice, session.voice):
        if _is_set(voice):
            updates["voice"] = voice
    for param, transcription in (
        ("session.audio.input.transcription", audio_in.transcription),
        ("session.input_audio_transcription", session.input_audio_transcription),
    ):
        if isinstance(transcription, TranscriptionShape):
            updates["transcription_model"] = transcription.model or ""
            updates["transcription_language"] = transcription.language or ""
            updates["transcription_prompt"] = _prompt(transcription.prompt or "", f"{param}.prompt")
            updates.update(_steering(transcription, param))
    updates.update(_tool_updates(config, session))
    updates.update(_hearing_updates(session, audio_in))
    if session.truncation is not UNSET:
        updates["truncation"] = parse_truncation(session.truncation, "session.truncation")
    if session.reasoning is not UNSET:
        updates["reasoning_effort"] = reasoning_effort(session.reasoning, "session.reasoning")
    return replace(config, **updates)


def reasoning_effort(value: ReasoningShape | None, param: str) -> str | None:
    """``reasoning``'s effort (``session.update``'s or ``response.create``'s); null: none named."""
    if value is None or value.effort is UNSET or value.effort is None:
        return None
    return one_of(value.effort, REASONING_EFFORTS, f"{param}.effort")


def _steering(transcription: TranscriptionShape, param: str) -> dict[str, Any]:
    """``keywords`` (their prompt within ``MAX_TRANSCRIPTION_PROMPT_CHARS``) and ``delay``."""
    keywords = tuple(word.strip() for word in transcription.keywords or () if word.strip())
    length = len(recogniser_prompt(transcription.prompt or "", keywords))
    if length > MAX_TRANSCRIPTION_PROMPT_CHARS:
        detail = (
            f"Invalid '{param}.keywords': with the prompt they are {length} characters; "
            f"the recogniser takes at most {MAX_TRANSCRIPTION_PROMPT_CHARS}."
        )
        raise INVALID_VALUE.error(detail=detail, param=f"{param}.keywords")
    delay = transcription.delay or ""
    if delay:
        one_of(delay, TRANSCRIPTION_DELAYS, f"{param}.delay")
    return {"transcription_keywords": keywords, "transcription_delay": delay}


def recogniser_prompt(prompt: str, keywords: tuple[str, ...]) -> str:
    """The recogniser's prompt: the client's, then its keywords (Whisper reads a prompt as words
    it has just heard, so the keywords' spellings become the likely ones)."""
    return ", ".join(part for part in (prompt, ", ".join(keywords)) if part)


def _prompt(value: str, param: str) -> str:
    """A transcription ``prompt`` no longer than OpenAI takes (``MAX_TRANSCRIPTION_PROMPT_CHARS``)."""
    if len(value) > MAX_TRANSCRIPTION_PROMPT_CHARS:
        raise STRING_ABOVE_MAX_LENGTH.error(
            name=param, maximum=MAX_TRANSCRIPTION_PROMPT_CHARS, length=len(value), param=param
        )
    return value


def _hearing_updates(session: SessionShape, audio_in: AudioInputShape) -> dict[str, Any]:
    """``noise_reduction`` (GA and beta spellings) and ``include``, where the update names them."""
    updates: dict[str, Any] = {}
    for param, reduction in (
        ("session.audio.input.noise_reduction", audio_in.noise_reduction),
        ("session.input_audio_noise_reduction", session.input_audio_noise_reduction),
    ):
        if reduction is not UNSET:
            updates["noise_reduction"] = _noise_reduction(reduction, f"{param}.type")
    if session.include is not UNSET:
        include = session.include or []  # null: nothing extra, as an empty list
        for index, name in enumerate(include):
            one_of(name, (LOGPROBS,), f"session.include[{index}]")
        updates["include"] = tuple(dict.fromkeys(include))
    return updates


def _noise_reduction(value: NoiseReductionShape | None, param: str) -> str | None:
    """The type of a ``noise_reduction`` object (``param`` names its type), or None: off."""
    if value is None:
        return None
    if value.type is UNSET:
        raise MISSING_REQUIRED_PARAMETER.error(name=param, param=param)
    return one_of(value.type, NOISE_REDUCTION_TYPES, param)


def _identity_updates(config: Config, session: SessionShape) -> dict[str, Any]:
    """The session's type, model, instructions and output modalities, where the update names them."""
    updates: dict[str, Any] = {}
    kind = config.session_type if session.type is UNSET else session.type
    if kind not in ("realtime", "transcription"):
        detail = f"session type {kind!r} is not supported; use 'realtime' or 'transcription'"
        raise INVALID_VALUE.error(detail=detail, param="session.type")
    if session.type is not UNSET:
        updates["session_type"] = kind
    if session.model:
        # Whether the session may still switch is the session's call (voice/session.py).
        updates["model"] = session.model
    if session.instructions is not UNSET:
        updates["instructions"] = expect(session.instructions, str, "session.instructions")
    for param, modalities in (
        ("session.output_modalities", session.output_modalities),
        ("session.modalities", session.modalities),
    ):
        if modalities is not UNSET:
            updates["output_modalities"] = _modalities(modalities, param)
    return updates


def _audio(audio: AudioShape | UnsetType | None) -> tuple[AudioInputShape, AudioOutputShape]:
    """GA's ``audio.input`` and ``audio.output`` (empty where left out; null is refused)."""
    if audio is UNSET:
        return AudioInputShape(), AudioOutputShape()
    audio = _object(audio, "session.audio")
    audio_in = _object(AudioInputShape() if audio.input is UNSET else audio.input, "session.audio.input")
    audio_out = _object(AudioOutputShape() if audio.output is UNSET else audio.output, "session.audio.output")
    return audio_in, audio_out


def _tool_updates(config: Config, session: SessionShape) -> dict[str, Any]:
    tools, mcp_tools = config.tools, config.mcp_tools
    if session.tools is not UNSET:
        tools, mcp_tools = fn.parse_session_tools(session.tools, "session.tools")
    if session.tool_choice is not UNSET:
        choice = fn.parse_tool_choice(session.tool_choice, tools, "session.tool_choice")
    else:
        choice = config.tool_choice
        fn.check_choice(choice, tools, "session.tool_choice")
    return {"tools": tools, "tool_choice": choice, "mcp_tools": mcp_tools}


def _truncation_to_wire(value: str | float) -> Any:
    return value if isinstance(value, str) else {"type": "retention_ratio", "retention_ratio": value}


def check_voice(voice: str, accepts: Callable[[str], bool] | None) -> None:
    """OpenAI's ``invalid_value`` for a voice the model cannot speak with (``accepts``: the model's
    lookup, None: any voice), naming it."""
    if accepts is not None and not accepts(voice):
        listed = ", ".join(f"'{name}'" for name in REALTIME_VOICES[:-1]) + f", and '{REALTIME_VOICES[-1]}'"
        detail = f"Invalid value: '{voice}'. Supported values are: {listed}."
        raise INVALID_VALUE.error(detail=detail, param="session.audio.output.voice")


def check_transcription_model(name: str, names: tuple[str, ...] | None) -> None:
    """OpenAI's ``invalid_value`` for a recogniser the model does not have (``names``: the model's,
    None: any), naming it and the ones it has: a misspelt name would otherwise be heard by the
    default one, silently."""
    if names is None or not name or name in names or is_openai_transcription_model(name):
        return
    listed = ", ".join(f"'{known}'" for known in names[:-1]) + f", and '{names[-1]}'"
    detail = f"Invalid value: '{name}'. Supported values are: {listed}."
    raise INVALID_VALUE.error(detail=detail, param="session.audio.input.transcription.model")
