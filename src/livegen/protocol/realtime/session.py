"""The session object (``session.created``, ``session.updated``) as the Realtime wire carries it.

Two shapes, as GA has them: a realtime session (audio in and out, tools) and
a transcription session (input audio only). Fields that OpenAI leaves out when
unset (an audio format's ``rate`` for G.711, a transcription's empty
``language`` and ``prompt``) are ``UNSET`` and omitted; fields it sends as
``null`` are ``None``. Beta's flat fields are ``BetaSessionObject``'s
(``beta.py``).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from livegen.protocol.audio import AudioFormat, Encoding


class AudioFormatObject(msgspec.Struct):
    type: str
    rate: int | UnsetType = UNSET


def format_object(fmt: AudioFormat) -> AudioFormatObject:
    """The wire form of an audio format: PCM names its rate, G.711 (always 8 kHz) does not."""
    if fmt.encoding is Encoding.PCM:
        return AudioFormatObject(fmt.encoding.value, fmt.rate)
    return AudioFormatObject(fmt.encoding.value)


class ServerVadObject(msgspec.Struct, tag="server_vad", tag_field="type"):
    threshold: float
    prefix_padding_ms: int
    silence_duration_ms: int
    create_response: bool
    interrupt_response: bool
    idle_timeout_ms: int | None


class SemanticVadObject(msgspec.Struct, tag="semantic_vad", tag_field="type"):
    eagerness: str
    create_response: bool
    interrupt_response: bool


TurnDetectionObject = ServerVadObject | SemanticVadObject


class TranscriptionObject(msgspec.Struct):
    model: str
    language: str | UnsetType = UNSET
    prompt: str | UnsetType = UNSET
    keywords: list[str] | UnsetType = UNSET
    delay: str | UnsetType = UNSET


class NoiseReductionObject(msgspec.Struct):
    #: "near_field" or "far_field".
    type: str


class AudioInputObject(msgspec.Struct):
    format: AudioFormatObject
    turn_detection: TurnDetectionObject | None
    transcription: TranscriptionObject | None
    noise_reduction: NoiseReductionObject | None = None


class AudioOutputObject(msgspec.Struct):
    format: AudioFormatObject
    voice: str
    speed: float = 1.0


class SessionAudio(msgspec.Struct):
    input: AudioInputObject
    output: AudioOutputObject


class TranscriptionAudio(msgspec.Struct):
    input: AudioInputObject


class ReasoningObject(msgspec.Struct):
    effort: str


class CapabilitiesObject(msgspec.Struct, kw_only=True):
    """What the session's model can do, for clients that adapt to it (the shape of vllm-omni's
    ``session.capabilities``); an extension: OpenAI's session object has no such field."""

    #: "cascade" (answers when asked: a committed turn or ``response.create``) or "native" (a
    #: full-duplex model that hears and speaks at once and takes its own turns).
    duplex: str
    #: The user talking over an answer cuts it (``cancelled``, history cut to what was heard).
    barge_in: bool = True
    #: ``playback.ack`` moves what was heard; an interrupted answer is cut there.
    playback_acks: bool = True
    #: A dropped socket may resume the session (``/v1/realtime?session_id=``).
    resume: bool = True
    #: The model's frame period in ms (a native duplex model); null when it has none.
    frame_ms: float | None = None
    #: The client may ask for responses (``response.create``).
    response_create: bool = True
    #: The model starts responses on its own.
    model_initiated_responses: bool = False


class SessionObject(msgspec.Struct, kw_only=True):
    id: str
    object: str = "realtime.session"
    type: str = "realtime"
    model: str
    instructions: str
    output_modalities: list[str]
    audio: SessionAudio
    #: Tools and the tool choice keep their JSON shape: JSON Schema parameters are the client's.
    tools: list[dict[str, Any]]
    tool_choice: str | dict[str, Any]
    max_output_tokens: int | Literal["inf"] = "inf"
    truncation: Any = "auto"
    #: What the client's ``include`` asked for; omitted when it asked for nothing.
    include: list[str] | UnsetType = UNSET
    #: ``reasoning`` (gpt-realtime-2's); omitted until the client sets an effort.
    reasoning: ReasoningObject | UnsetType = UNSET
    #: What the model can do (an extension, ``CapabilitiesObject``); omitted where not known.
    capabilities: CapabilitiesObject | UnsetType = UNSET


class TranscriptionSessionObject(msgspec.Struct, kw_only=True):
    id: str
    object: str = "realtime.transcription_session"
    type: str = "transcription"
    audio: TranscriptionAudio
    include: list[str] = msgspec.field(default_factory=list)


class BetaSessionObject(SessionObject, kw_only=True):
    """The GA session with beta's flat fields after it (a beta client reads those)."""

    modalities: list[str]
    voice: str
    input_audio_format: str | None
    output_audio_format: str | None
    turn_detection: TurnDetectionObject | None
    input_audio_transcription: TranscriptionObject | None
    #: Omitted while noise reduction is off (as beta sessions always were here).
    input_audio_noise_reduction: NoiseReductionObject | UnsetType = UNSET


AnySessionObject = SessionObject | TranscriptionSessionObject
