"""The server's configuration: one frozen value built by the CLI or by tests."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from livegen.errors import ConfigError
from livegen.models.voice import LLMLimits, SpeechStack


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    #: Required as a bearer token on every route but /health when set.
    api_key: str | None = field(default_factory=lambda: os.environ.get("LIVEGEN_API_KEY") or None)
    #: A registered voice model name, "auto" (the best available) or "none".
    voice_model: str = "auto"
    #: A registered world model name, "auto" (the best available) or "none".
    world_model: str = "auto"
    #: Names the voice model answers to (like vLLM's ``--served-model-name``); the first is the
    #: ``model`` its sessions report. Empty: its registered name.
    served_model_names: tuple[str, ...] = ()
    #: Shell-style patterns of more names for the voice model, beside OpenAI's realtime families.
    model_aliases: tuple[str, ...] = ()
    log_level: str = "info"
    #: Most sessions of each kind served at once; more are refused with a clear error.
    max_sessions: int = 64
    #: Seconds a voice session outlives a lost socket, waiting for ``session.resume`` (0: none).
    resume_grace_s: float = 30.0
    #: Most voice sessions parked (waiting for a resume) at once, apart from ``max_sessions``;
    #: parking one more ends the oldest parked one.
    max_parked_sessions: int = 64
    #: Most bytes of journal and history all parked sessions hold together (the oldest go first).
    max_parked_bytes: int = 256 * 1024 * 1024
    #: OpenAI-compatible chat endpoint for the voice model's replies (optional).
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_api_key: str | None = field(default_factory=lambda: os.environ.get("LIVEGEN_LLM_API_KEY") or None)
    #: The endpoint's context window in tokens; the oldest turns leave the prompt to fit (None: never cut).
    llm_context_tokens: int | None = None
    #: Deadlines and caps of each language-model answer (``LLMLimits``); past one, that response fails.
    llm_first_token_s: float = LLMLimits.first_token_s
    llm_answer_s: float = LLMLimits.answer_s
    llm_max_line_kib: int = LLMLimits.max_line_bytes // 1024
    llm_max_arguments_kib: int = LLMLimits.max_arguments_bytes // 1024
    llm_max_text_kib: int = LLMLimits.max_text_bytes // 1024
    llm_max_tool_calls: int = LLMLimits.max_calls
    #: OpenAI-compatible speech endpoint (``POST {url}/audio/speech``) that speaks for the sessions
    #: in place of the voice model's own voice, and the ``model`` asked of it (optional).
    tts_base_url: str | None = None
    tts_api_key: str | None = field(default_factory=lambda: os.environ.get("LIVEGEN_TTS_API_KEY") or None)
    tts_model: str = "tts-1"
    #: OpenAI-compatible transcription endpoint (``POST {url}/audio/transcriptions``) for the turn
    #: transcript, in place of the voice model's own recogniser, and the ``model`` asked of it.
    asr_base_url: str | None = None
    asr_api_key: str | None = field(default_factory=lambda: os.environ.get("LIVEGEN_ASR_API_KEY") or None)
    asr_remote_model: str = "whisper-1"
    #: The cascade voice model's options (its ``CascadeSettings``, whose fields have these names).
    #: None, each: its ``LIVEGEN_`` variable (``LIVEGEN_ASR_MODEL``...), else the model's default.
    #: The model is loaded once per process: a second server asking for other values fails its load.
    #: The recogniser for sessions that name none (``--asr-model``). A local CTranslate2 Whisper
    #: directory (``--asr-model-path``) is one more recogniser, named after the directory, and the
    #: default unless ``asr_model`` names another.
    asr_model: str | None = None
    asr_model_path: str | None = None
    #: The Silero build of the voice activity detector: "onnx" or "ggml".
    vad: str | None = None
    #: Most utterances in one Whisper call (1: one at a time), batches decoded at once, threads each.
    asr_batch: int | None = None
    asr_workers: int | None = None
    asr_threads: int | None = None
    #: Speech-synthesis worker processes, and the ONNX threads of each.
    tts_workers: int | None = None
    tts_threads: int | None = None
    #: The cascade's language model (``--llm``: auto, builtin or an embedded model's name), and
    #: the embedded model's decoding threads, context per conversation and conversations at once.
    llm: str | None = None
    llm_threads: int | None = None
    llm_context: int | None = None
    llm_parallel: int | None = None
    #: Seconds a remote speech stage may take to connect, to answer and between two pieces of its
    #: answer (a turn's transcript may take its audio's length more); then the response fails.
    speech_timeout_s: float = 10.0
    #: A native duplex (lockstep) voice model has yielded its turn after this many ms not speaking.
    duplex_yield_ms: float = 320.0
    #: Share of a duplex model's frame period its batched step may take; past it a new session is
    #: refused (``realtime_capacity``). 0: admit while the model has slots.
    duplex_realtime_headroom: float = 0.9
    #: Hosts (``host`` or ``host:port``) a voice session's remote MCP tools may reach: the client
    #: picks the ``server_url``, so it is the operator's to allow; none by default.
    mcp_allowed_hosts: tuple[str, ...] = ()
    #: Seconds one MCP request (listing a server's tools, or one call) may take; then it fails.
    mcp_timeout_s: float = 30.0
    #: World workers: 0 steps the world model in this process; N > 0 starts N Ray actors.
    world_workers: int = 0
    #: Share of a world worker's time its realtime sessions' batches may need (step times measured
    #: per batch size); past it, a new realtime session is refused (``realtime_capacity``) and
    #: /health is not ready. 0: no frame-clock admission.
    world_realtime_headroom: float = 0.85
    #: Ray cluster to join (e.g. "auto" or "head:6379"): the server's processes register there, resume
    #: each other's sessions and share counts (``cluster/coordinator.py``); world workers are placed there.
    #: None: a local Ray, started only when something needs one (``workers`` > 1, world workers).
    ray_address: str | None = None
    #: Server processes on the one port (``cluster/supervisor.py``); 1: this process alone.
    workers: int = 1
    #: Seconds a ``SIGTERM`` lets live sessions finish before the rest are ended (``server_shutdown``).
    drain_timeout_s: float = 30.0
    #: Browser origins allowed (``*``: any); None is the default policy of ``server/http/origins.py``.
    allowed_origins: tuple[str, ...] | None = None
    #: ``Host`` header names allowed (``*``: any); None is the default policy of ``server/http/origins.py``.
    allowed_hosts: tuple[str, ...] | None = None
    #: Most WebSocket connections open at once, all routes together (one more is refused with 503),
    #: and apart from them most HTTP connections not upgraded (one more closes the one waiting longest
    #: for a request head, or is refused with 503 when every one is mid-request).
    max_connections: int = 256
    #: Bytes a connection may have queued for its socket but not yet written; past it, close 4002.
    max_unsent_bytes: int = 16 * 1024 * 1024
    #: Seconds a WebSocket may stay silent after its handshake before its first message (0: no limit).
    first_message_timeout_s: float = 30.0
    #: Seconds an idle HTTP keep-alive connection is kept (uvicorn's ``timeout_keep_alive``).
    keep_alive_timeout_s: int = 5
    #: Largest HTTP request head (request line and headers), in bytes, complete or still arriving;
    #: a larger one is answered 431 and its connection closed (``server/http/bodies.py``).
    max_header_bytes: int = 16 * 1024
    #: Seconds a connection may take to send a request head, from connecting or from the head's
    #: first byte on a kept-alive connection; then 408 and closed (slow or silent clients).
    header_timeout_s: float = 10.0
    #: Largest HTTP request body on any route, in bytes; a larger one is answered 413.
    max_body_bytes: int = 1024 * 1024
    #: Seconds a request body may take to arrive in full, from its head; then 408 and closed.
    body_timeout_s: float = 30.0
    #: Bytes of session configuration all live ephemeral keys hold together; minting past it
    #: (or past 10,000 keys) is refused with 429 until keys expire. No live key is ever dropped.
    max_client_secret_bytes: int = 64 * 1024 * 1024
    #: A directory of voice-model weights (``moshi``: the transformers layout), their dtype and device.
    voice_model_path: str | None = None
    voice_dtype: str = "auto"
    voice_device: str = "auto"
    #: A directory of world-model weights (``causal-wan``), and their dtype and device.
    world_model_path: str | None = None
    world_dtype: str = "auto"
    world_device: str = "auto"
    #: Frames per chunk of a world model that generates frame by frame (tiny-world); None: its own.
    world_frames_per_chunk: int | None = None
    #: Directory of world-session recordings (``session.update`` ``recording: true``); None: off.
    world_recordings: str | None = None
    #: Most recordings kept, and most bytes they take together; past either the oldest go first.
    world_recordings_max_count: int = 100
    world_recordings_max_bytes: int = 2 * 1024 * 1024 * 1024
    #: Spectators of one world session, and of all world sessions together.
    world_max_spectators_per_session: int = 8
    world_max_spectators: int = 64
    #: Seconds a spectate token (``session.spectate_token``) lets a spectator join.
    world_spectate_token_ttl_s: float = 600.0

    def llm_limits(self) -> LLMLimits:
        """What one answer of ``--llm-base-url`` may cost."""
        return LLMLimits(
            first_token_s=self.llm_first_token_s,
            answer_s=self.llm_answer_s,
            max_line_bytes=self.llm_max_line_kib * 1024,
            max_arguments_bytes=self.llm_max_arguments_kib * 1024,
            max_text_bytes=self.llm_max_text_kib * 1024,
            max_calls=self.llm_max_tool_calls,
        )

    def voice_options(self) -> dict[str, str]:
        """Keyword options for the served voice model's loader: only those set, so models without
        any (the cascade) load."""
        options = {"path": self.voice_model_path, "dtype": self.voice_dtype, "device": self.voice_device}
        defaults = {"path": None, "dtype": "auto", "device": "auto"}
        return {key: value for key, value in options.items() if value != defaults[key] and value is not None}

    def world_options(self) -> dict[str, str | int]:
        """Keyword options for the world model's loader: only those set, so models without any load."""
        options = {"path": self.world_model_path, "dtype": self.world_dtype, "device": self.world_device}
        defaults = {"path": None, "dtype": "auto", "device": "auto"}
        chosen: dict[str, str | int] = {
            key: value for key, value in options.items() if value != defaults[key] and value is not None
        }
        if self.world_frames_per_chunk is not None:
            chosen["frames_per_chunk"] = self.world_frames_per_chunk
        return chosen

    #: STUN/TURN URLs for WebRTC calls behind NAT; empty: host candidates only (loopback, LAN).
    webrtc_ice_servers: tuple[str, ...] = ()
    #: Most WebRTC calls at once (each is also a voice session under ``max_sessions``).
    webrtc_max_calls: int = 32

    #: Largest upload to /v1/audio/transcriptions, in bytes (OpenAI's 25 MiB); more is refused with 413.
    max_audio_bytes: int = 25 * 1024 * 1024
    #: Longest audio /v1/audio/transcriptions decodes, in seconds (OpenAI's gpt-4o-transcribe's); more: 400.
    max_audio_s: float = 1500.0
    #: Most /v1/audio/ requests served at once, each until its last byte; more are refused with 429.
    max_audio_requests: int = 4

    #: PEM certificate chain and private key: with both set, the server speaks TLS (https://, wss://).
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    def __post_init__(self) -> None:
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ConfigError("TLS needs both --ssl-certfile and --ssl-keyfile")

    def speech_stack(self) -> SpeechStack:
        """The remote speech stages of the voice model's sessions (none set: its own)."""
        return SpeechStack(
            self.tts_base_url,
            self.tts_api_key,
            self.tts_model,
            self.asr_base_url,
            self.asr_api_key,
            self.asr_remote_model,
            self.speech_timeout_s,
        )

    @property
    def tls(self) -> bool:
        return self.ssl_certfile is not None
