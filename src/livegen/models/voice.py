"""The voice-model contract: a stream per session, inputs tagged by epoch.

A voice model opens one ``VoiceStream`` per session. The runtime feeds it input
audio in wire order, end-of-turn commits, response requests and cancels, each
tagged with the session epoch in force when the client asked; the stream yields
``VoiceOutput`` items, each tagged with the epoch of the request it answers.
The session core drops outputs of an older epoch (the epoch fence, promise V2
in docs/architecture.md), so a model never has to be perfectly prompt at
cancelling: it only has to tag honestly.

Both shapes of speech model fit:

- a cascade (voice activity, speech recognition, a reply, speech synthesis)
  emits ``SPEECH_STARTED``/``SPEECH_STOPPED`` from its detector, a transcript
  per committed item, then text and audio deltas per response;
- a native full-duplex model stepping fixed frames emits the same kinds, and
  ``LISTEN`` when it chose not to speak.

Audio is PCM16 little-endian mono: input at ``input_rate``, output at
``output_rate``; the protocol layer resamples to and from the wire format.
Models never see WebSockets, wire events or base64.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable


class OutputKind(StrEnum):
    #: The model's detector heard speech start; ``audio_ms`` is where, in input audio.
    SPEECH_STARTED = "speech_started"
    #: Speech stopped at ``audio_ms``; under server VAD this ends the user's turn.
    SPEECH_STOPPED = "speech_stopped"
    #: Part of the transcript of user item ``item_id``.
    TRANSCRIPT_DELTA = "transcript_delta"
    #: The whole transcript of user item ``item_id``.
    TRANSCRIPT_DONE = "transcript_done"
    #: Assistant text for response ``response_id``.
    TEXT_DELTA = "text_delta"
    #: Assistant audio (PCM16 at ``output_rate``) for response ``response_id``.
    AUDIO_DELTA = "audio_delta"
    #: A duplex model chose to listen rather than speak.
    LISTEN = "listen"
    #: The text and audio that follow begin a new message item of response ``response_id`` in
    #: phase ``text``: ``commentary`` (a short spoken preamble while the answer is being made) or
    #: ``final_answer`` (the answer after it).
    PHASE = "phase"
    #: Response ``response_id`` ended; ``status`` is completed, incomplete or failed.
    RESPONSE_DONE = "response_done"
    #: The model failed; ``text`` says why. The session fails the affected response.
    ERROR = "error"
    #: A whole function call of response ``response_id``: ``call_id`` (the model's, or "" for the
    #: session to make one), ``name``, and the JSON arguments in ``text``.
    FUNCTION_CALL = "function_call"
    #: The tools of the session's MCP server whose ``mcp_list_tools`` item is ``item_id``, as JSON
    #: (a list of ``{name, description, input_schema, annotations}``); not bound to an epoch.
    MCP_TOOLS_LISTED = "mcp_tools_listed"
    #: Listing the tools of that server failed; ``text`` says why.
    MCP_TOOLS_FAILED = "mcp_tools_failed"
    #: The model calls tool ``name`` of MCP server ``server_label`` itself, in response
    #: ``response_id``: ``call_id`` names the call, ``text`` holds the JSON arguments.
    MCP_CALL = "mcp_call"
    #: That call ended: ``status`` "completed" with the output in ``text``, or "failed" with the
    #: error's type in ``code`` (``tool_execution_error``, ``http_error``, ``protocol_error``) and
    #: its message in ``text``.
    MCP_CALL_DONE = "mcp_call_done"
    #: The model asks the client to approve a call before it makes it: ``call_id`` is the approval
    #: request's id (the item's), ``name``, ``server_label`` and the arguments in ``text``.
    MCP_APPROVAL_REQUEST = "mcp_approval_request"


@dataclass(frozen=True)
class VoiceOutput:
    kind: OutputKind
    epoch: int
    response_id: str | None = None
    item_id: str | None = None
    text: str = ""
    audio: bytes = field(default=b"", repr=False)
    audio_ms: int = 0
    status: str = ""
    #: For ``ERROR``: a machine code for the failure (``speech_worker_stuck``); "" means ``model_error``.
    code: str = ""
    #: For ``FUNCTION_CALL``: the call's id and the function's name.
    call_id: str = ""
    name: str = ""
    #: For ``RESPONSE_DONE``: token counts as the language model reported them (``Usage``), if any.
    usage: Usage | None = None
    #: For ``TRANSCRIPT_DONE`` when asked for: OpenAI's ``logprobs`` entries ({token, logprob, bytes}).
    logprobs: tuple[Mapping[str, Any], ...] | None = None
    #: For the MCP kinds: the server's label, and the approval a call was made under ("" none).
    server_label: str = ""
    approval_request_id: str = ""


@dataclass(frozen=True)
class Usage:
    """Tokens one response cost, as its language model counted them (chat-completions ``usage``)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0


@dataclass(frozen=True)
class TurnDetection:
    """Server VAD settings, OpenAI's defaults."""

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    #: ``semantic_vad``'s eagerness ("low", "medium", "high", "auto"); None for ``server_vad``.
    #: A model with an end-of-turn model uses it; others time the turn by the silence above.
    eagerness: str | None = None


@dataclass(frozen=True)
class McpServer:
    """A remote MCP server a session gave its model (a ``{"type": "mcp"}`` tool): the model lists
    its tools (reporting them as the ``mcp_list_tools`` item ``list_item_id``), offers them to its
    language model beside the function tools, and calls them itself."""

    server_label: str
    server_url: str
    #: The ``mcp_list_tools`` item this server's tools are reported as.
    list_item_id: str
    #: Tool names the model may use (None: all the server lists).
    allowed_tools: tuple[str, ...] | None = None
    #: Whether a tool named in neither list below needs the client's approval before each call.
    approval_by_default: bool = True
    always_approve: tuple[str, ...] = ()
    never_approve: tuple[str, ...] = ()
    #: Sent with every request to the server; secrets: never logged, echoed or shown (``repr``).
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    #: Seconds one request to the server (the listing, or one call) may take (``--mcp-timeout``).
    timeout_s: float = 30.0

    def needs_approval(self, name: str) -> bool:
        if name in self.always_approve:
            return True
        return name not in self.never_approve and self.approval_by_default

    def allows(self, name: str) -> bool:
        return self.allowed_tools is None or name in self.allowed_tools


@runtime_checkable
class McpApprovals(Protocol):
    """A voice stream that calls MCP tools and can be told the client's answer to an approval
    request (an ``mcp_approval_response`` item)."""

    async def approve(self, epoch: int, approval_request_id: str, approve: bool) -> None: ...


@dataclass(frozen=True)
class StreamConfig:
    instructions: str = ""
    voice: str = ""
    #: None means the client commits turns itself (turn_detection: null).
    turn_detection: TurnDetection | None = field(default_factory=TurnDetection)
    transcription_model: str = ""
    #: The session's function tools (chat-completions shape) and tool choice, so a model that
    #: prepares answers ahead of ``respond`` prepares them with the tools the response will have.
    tools: tuple[Mapping[str, Any], ...] = ()
    tool_choice: str | Mapping[str, Any] = "auto"
    #: ISO-639-1, for a multilingual recogniser; "" lets the model assume English.
    transcription_language: str = ""
    #: Context for the recogniser: names, spellings, the previous sentence (and ``keywords``).
    transcription_prompt: str = ""
    #: ``transcription.delay`` ("minimal" .. "xhigh"): how often live captions are cut; "": the default.
    transcription_delay: str = ""
    #: "near_field" or "far_field": denoise the input before VAD and recognition; "" off.
    noise_reduction: str = ""
    #: Transcription outputs carry token log probabilities (``include`` asked for them).
    transcription_logprobs: bool = False
    #: ``reasoning.effort`` ("minimal" .. "xhigh") for a reasoning language model; None: its own.
    reasoning_effort: str | None = None
    #: The session's remote MCP servers, whose tools the model lists, offers and calls itself.
    mcp_servers: tuple[McpServer, ...] = ()


@dataclass(frozen=True)
class HistoryTurn:
    """One conversation item as the listener heard it (already truncated).

    ``kind`` is ``message`` (``role`` and ``text``), ``function_call`` (an assistant call:
    ``call_id``, ``name``, arguments in ``text``) or ``function_call_output`` (``call_id``, the
    output in ``text``). History holds a call only together with its one output.
    """

    role: str
    text: str
    kind: str = "message"
    call_id: str = ""
    name: str = ""
    #: A user message's images: ``(data URI, detail)``, for a vision-capable language model.
    images: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ResponseRequest:
    response_id: str
    history: Sequence[HistoryTurn] = ()
    instructions: str = ""
    modalities: tuple[str, ...] = ("audio", "text")
    voice: str = ""
    #: Function tools in chat-completions shape (``{"type": "function", "function": {...}}``).
    tools: tuple[Mapping[str, Any], ...] = ()
    #: ``auto``, ``none``, ``required`` or ``{"type": "function", "function": {"name": ...}}``.
    tool_choice: str | Mapping[str, Any] = "auto"
    #: Output tokens the response may use (None: no limit); past it, it ends ``incomplete``.
    max_output_tokens: int | None = None
    #: How the history is cut to the model's context: "auto", "disabled", or a retention ratio.
    truncation: str | float = "auto"
    #: ``reasoning.effort`` for a reasoning language model; None: the endpoint's own.
    reasoning_effort: str | None = None


@runtime_checkable
class VoiceStream(Protocol):
    """One session's view of a voice model. Calls come from one task, in order."""

    async def append(self, epoch: int, pcm: bytes) -> None:
        """Take input audio, in wire order. May raise; the runtime compensates."""
        ...

    async def commit(self, epoch: int, item_id: str) -> None:
        """The input since the last commit is user item ``item_id``: transcribe it."""
        ...

    async def clear(self, epoch: int) -> None:
        """Drop uncommitted input audio."""
        ...

    async def respond(self, epoch: int, request: ResponseRequest) -> None:
        """Start a response; outputs follow, ended by ``RESPONSE_DONE``."""
        ...

    async def cancel(self, epoch: int) -> None:
        """Stop work of epochs before ``epoch``; their outputs are dropped anyway."""
        ...

    async def update(self, config: StreamConfig) -> None:
        """Apply a new session configuration."""
        ...

    def outputs(self) -> AsyncIterator[VoiceOutput]:
        """Everything the model says, in order, until ``aclose``."""
        ...

    async def aclose(self) -> None:
        """Release the stream's resources; outputs() ends."""
        ...


@dataclass(frozen=True)
class ModelHealth:
    """A loaded model's own view of whether it can serve: ``/health`` answers 503 with ``reason`` if not."""

    ready: bool = True
    #: Why it cannot serve now, for a person ("speech worker 1 (pid 42) stopped answering ...").
    reason: str = ""
    #: What the model reports about its parts (workers, their states), shown as-is in ``/health``.
    detail: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class VoiceModel(Protocol):
    name: str
    #: Rate of the PCM16 the model takes.
    input_rate: int
    #: Rate of the PCM16 the model emits.
    output_rate: int
    #: Whether the stream emits SPEECH_STARTED/STOPPED itself (server VAD).
    has_vad: bool

    async def open(self, session_id: str, config: StreamConfig) -> VoiceStream: ...

    def health(self) -> ModelHealth:
        """Whether the model can serve now; cheap, called on every ``/health``, from the event loop."""
        ...


@dataclass(frozen=True)
class LLMLimits:
    """What one answer of a language model may cost: past any of these its response ends ``failed``.

    The endpoint is not trusted to end, to end lines, or to keep to ``max_tokens``: every answer
    has deadlines and caps, so a broken or hostile endpoint costs one response, never the server's
    memory, its event loop, or a client's connection (``--llm-*`` options of ``livegen serve``).
    """

    #: Seconds from the request to the first words or call of the answer.
    first_token_s: float = 30.0
    #: Seconds from the request to the answer's end.
    answer_s: float = 300.0
    #: Longest line of the endpoint's event stream, in bytes.
    max_line_bytes: int = 1024 * 1024
    #: Bytes of function-call arguments in one answer, all calls together.
    max_arguments_bytes: int = 1024 * 1024
    #: Bytes of words (UTF-8) in one answer.
    max_text_bytes: int = 64 * 1024
    #: Function calls in one answer.
    max_calls: int = 32


@runtime_checkable
class RemoteLLM(Protocol):
    """A voice model that can answer through an OpenAI-compatible chat endpoint
    (``--llm-base-url``, ``--llm-model``); the engine configures it once, after loading."""

    def use_llm(
        self,
        base_url: str | None,
        model: str | None,
        api_key: str | None = None,
        context_tokens: int | None = None,
        limits: LLMLimits | None = None,
    ) -> None: ...


@dataclass(frozen=True)
class SpeechStack:
    """Remote speech stages of a server (``--tts-base-url``, ``--asr-base-url``): OpenAI-compatible
    ``/v1/audio/speech`` and ``/v1/audio/transcriptions`` endpoints that speak and hear for its
    sessions in place of the model's own voice and recogniser."""

    tts_base_url: str | None = None
    tts_api_key: str | None = None
    #: The ``model`` sent with each speech request.
    tts_model: str = "tts-1"
    asr_base_url: str | None = None
    asr_api_key: str | None = None
    #: The ``model`` sent with each transcription request.
    asr_model: str = "whisper-1"
    #: Seconds a stage may take to connect, to answer, and between two pieces of its answer.
    timeout_s: float = 10.0

    @property
    def is_remote(self) -> bool:
        return bool(self.tts_base_url or self.asr_base_url)


class SharedSpeech(Protocol):
    """A cluster's speech service (``cluster/speech.py``): the heavy parts a voice model can share
    (the cascade's recogniser, speech workers and end-of-turn model), loaded once for every
    server process. The registry hands it to a loader that takes ``speech``; in a server of its
    own there is none, and the model loads its parts itself."""

    def connect(self, settings: Any) -> VoiceModel:
        """The model of this process, its heavy parts the service's (waited for until loaded)."""
        ...


@runtime_checkable
class RemoteSpeech(Protocol):
    """A voice model whose sessions can speak and hear through remote stages; the engine asks
    it once, after loading, for a copy bound to the server's ``SpeechStack`` (the model itself
    is shared by every server of the process, so it is never changed)."""

    def with_speech(self, stack: SpeechStack) -> VoiceModel: ...

    async def close_speech(self) -> None:
        """Close the remote stages' connections (the server is stopping)."""
        ...


@dataclass(frozen=True)
class ClipSegment:
    """A piece of a whole clip's transcript, ``start`` to ``end`` in seconds of the clip."""

    start: float
    end: float
    text: str
    #: What the recogniser took in and gave out, in its own tokens (OpenAI's transcription usage).
    audio_tokens: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    #: OpenAI's ``logprobs`` entries ({token, logprob, bytes}) of the text, when asked for.
    logprobs: tuple[Mapping[str, Any], ...] | None = None


#: OpenAI's transcription models (the names its SDK documents): a voice model takes each, and each
#: one's dated form (``gpt-4o-mini-transcribe-2025-03-20``), to mean its default recogniser. A client
#: names one by default (pipecat 1.14: ``gpt-realtime-whisper``), so none may be refused.
OPENAI_TRANSCRIPTION_MODELS = (
    "whisper-1",
    "gpt-4o-transcribe",
    "gpt-4o-transcribe-diarize",
    "gpt-4o-mini-transcribe",
    "gpt-4o-mini-transcribe-2025-12-15",
    "gpt-realtime-whisper",
    "gpt-live-transcribe",
    "gpt-transcribe",
)
_DATED = re.compile(r"(?P<name>.+)-\d{4}-\d{2}-\d{2}")


def is_openai_transcription_model(name: str) -> bool:
    """One of OpenAI's transcription model names, or its dated form."""
    dated = _DATED.fullmatch(name)
    return name in OPENAI_TRANSCRIPTION_MODELS or (
        dated is not None and dated["name"] in OPENAI_TRANSCRIPTION_MODELS
    )


@runtime_checkable
class ClipAudio(Protocol):
    """A voice model that also works on whole clips, outside any session: the server's
    ``/v1/audio/transcriptions`` and ``/v1/audio/speech`` (``server/audio/routes.py``)."""

    #: The recognisers a client may name; any other transcription model name means the default one.
    transcription_models: tuple[str, ...]

    def accepts_voice(self, voice: str) -> bool:
        """Whether ``voice`` is one of the model's own voice names (OpenAI's are the server's to map)."""
        ...

    def transcribe_clip(
        self, pcm: bytes, model: str = "", language: str = "", prompt: str = "", logprobs: bool = False
    ) -> AsyncGenerator[ClipSegment, None]:
        """The transcript of PCM16 at ``input_rate``, piece by piece as each is decoded
        (with each piece's token ``logprobs`` if asked)."""
        ...

    def speak_text(self, text: str, voice: str = "", speed: float = 1.0) -> AsyncGenerator[bytes, None]:
        """``text`` spoken, PCM16 at ``output_rate``, a sentence at a time as each is synthesised;
        stopping the iteration early (``aclose``) drops the sentences not yet spoken."""
        ...
