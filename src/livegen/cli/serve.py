"""``livegen serve``: the server's command line, one option per ``ServerConfig`` setting.

``serve_help.py`` sorts the options into the groups of ``--help GROUP`` and reads ``--config``;
``serve_cascade.py`` (the cascade voice model) and ``serve_edge.py`` (HTTP limits, the audio API,
TLS, WebRTC) hold the options of two concerns apart.

Each option reads its default from ``ServerConfig`` (``_default``), where it is stated once, so
``--help`` shows what a server started without the flag does; ``tests/test_cli.py`` checks it.
The options are many, hence a module of their own, which ``cli/__init__.py`` loads on use.
"""

from __future__ import annotations

from typing import Any

import click

from livegen.cli.serve_cascade import cascade_options
from livegen.cli.serve_edge import edge_options
from livegen.cli.serve_help import ServeCommand, config_option
from livegen.models.voice import LLMLimits  # light: the defaults of the --llm-* limits
from livegen.server.config import ServerConfig  # light: the server's package loads its app lazily


def _default(name: str) -> Any:
    """A ``livegen serve`` option's default: ``ServerConfig``'s, stated there once."""
    return ServerConfig.__dataclass_fields__[name].default


@click.command(cls=ServeCommand)
@config_option
@click.option("--host", default=_default("host"), show_default=True, help="Address to listen on.")
@click.option(
    "--port", default=_default("port"), show_default=True, type=click.IntRange(0, 65535), help="TCP port."
)
@click.option(
    "--api-key",
    envvar="LIVEGEN_API_KEY",
    default=None,
    help="Require 'Authorization: Bearer KEY' on every route but /health [env: LIVEGEN_API_KEY].",
)
@click.option(
    "--voice-model",
    default=_default("voice_model"),
    show_default=True,
    help="Voice model to serve at /v1/realtime: a name from `livegen models`, 'auto' or 'none'.",
)
@click.option(
    "--served-model-name",
    "served_model_names",
    multiple=True,
    metavar="NAME",
    help="A name the voice model answers to (repeatable); the first is the model sessions report "
    "[default: its registered name]. OpenAI's realtime names (gpt-realtime*, gpt-4o*-realtime*) always work.",
)
@click.option(
    "--model-alias",
    "model_aliases",
    multiple=True,
    metavar="PATTERN",
    help="More names for the voice model, shell-style (repeatable), e.g. 'my-voice-*'.",
)
@click.option(
    "--world-model",
    default=_default("world_model"),
    show_default=True,
    help="World model to serve at /v1/worlds: a name from `livegen models`, 'auto' or 'none'.",
)
@click.option(
    "--log-level",
    default=_default("log_level"),
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
    help="Lowest level of log lines written to stderr.",
)
@click.option(
    "--max-sessions",
    default=_default("max_sessions"),
    show_default=True,
    type=click.IntRange(1),
    help="Sessions of each kind.",
)
@click.option(
    "--resume-grace",
    "resume_grace_s",
    default=_default("resume_grace_s"),
    show_default=True,
    type=click.FloatRange(0),
    help="Seconds a voice session outlives a lost socket, waiting for session.resume; 0 ends it at once.",
)
@click.option(
    "--max-parked-sessions",
    default=_default("max_parked_sessions"),
    show_default=True,
    type=click.IntRange(0),
    help="Voice sessions parked for a resume at once, apart from --max-sessions; the oldest go first.",
)
@click.option(
    "--max-parked-mib",
    "max_parked_bytes",
    default=_default("max_parked_bytes") // (1024 * 1024),
    show_default=True,
    type=click.IntRange(0),
    callback=lambda _ctx, _param, mib: mib * 1024 * 1024,
    help="MiB of journal and history all parked voice sessions hold together; the oldest go first.",
)
@click.option(
    "--llm-base-url",
    envvar="LIVEGEN_LLM_BASE_URL",
    default=None,
    help="OpenAI-compatible chat endpoint for voice replies, e.g. http://127.0.0.1:11434/v1.",
)
@click.option("--llm-model", envvar="LIVEGEN_LLM_MODEL", default=None, help="Model name at --llm-base-url.")
@click.option(
    "--llm-api-key", envvar="LIVEGEN_LLM_API_KEY", default=None, help="Bearer key of --llm-base-url."
)
@click.option(
    "--llm-context-tokens",
    envvar="LIVEGEN_LLM_CONTEXT_TOKENS",
    default=None,
    type=click.IntRange(256),
    help="Context window of --llm-model in tokens; oldest turns leave the prompt first [default: none].",
)
@click.option(
    "--llm-first-token-timeout",
    "llm_first_token_s",
    default=LLMLimits.first_token_s,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Seconds from asking --llm-base-url to its first words or call; past it the response fails "
    "(llm_timeout).",
)
@click.option(
    "--llm-answer-timeout",
    "llm_answer_s",
    default=LLMLimits.answer_s,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Seconds from asking --llm-base-url to the end of its answer; past it the response fails.",
)
@click.option(
    "--llm-max-line-kib",
    default=LLMLimits.max_line_bytes // 1024,
    show_default=True,
    type=click.IntRange(1),
    help="Longest line of the language model's event stream; past it the response fails "
    "(llm_output_too_large).",
)
@click.option(
    "--llm-max-arguments-kib",
    default=LLMLimits.max_arguments_bytes // 1024,
    show_default=True,
    type=click.IntRange(1),
    help="Function-call arguments of one answer, all calls together; keep it well under "
    "--max-unsent-bytes (each call's arguments go out about five times).",
)
@click.option(
    "--llm-max-text-kib",
    default=LLMLimits.max_text_bytes // 1024,
    show_default=True,
    type=click.IntRange(1),
    help="Words of one language-model answer; past it the response fails (llm_output_too_large).",
)
@click.option(
    "--llm-max-tool-calls",
    default=LLMLimits.max_calls,
    show_default=True,
    type=click.IntRange(1),
    help="Function calls in one language-model answer; past it the response fails.",
)
@click.option(
    "--tts-base-url",
    envvar="LIVEGEN_TTS_BASE_URL",
    default=None,
    help="OpenAI-compatible speech endpoint that speaks for the voice sessions (POST "
    "{url}/audio/speech, streamed pcm), e.g. another livegen's http://host:8000/v1 [default: own voice].",
)
@click.option(
    "--tts-api-key", envvar="LIVEGEN_TTS_API_KEY", default=None, help="Bearer key of --tts-base-url."
)
@click.option(
    "--tts-model",
    envvar="LIVEGEN_TTS_MODEL",
    default=_default("tts_model"),
    show_default=True,
    help="The model asked of --tts-base-url.",
)
@click.option(
    "--asr-base-url",
    envvar="LIVEGEN_ASR_BASE_URL",
    default=None,
    help="OpenAI-compatible transcription endpoint for the turn transcript (POST "
    "{url}/audio/transcriptions, stream=true where offered); live captions stay local [default: own].",
)
@click.option(
    "--asr-api-key", envvar="LIVEGEN_ASR_API_KEY", default=None, help="Bearer key of --asr-base-url."
)
@click.option(
    "--asr-remote-model",
    envvar="LIVEGEN_ASR_REMOTE_MODEL",
    default=_default("asr_remote_model"),
    show_default=True,
    help="The model asked of --asr-base-url.",
)
@click.option(
    "--speech-timeout",
    "speech_timeout_s",
    default=_default("speech_timeout_s"),
    show_default=True,
    type=click.FloatRange(0.1),
    help="Seconds --tts-base-url or --asr-base-url may take to connect, to answer and between two pieces "
    "of an answer; then that response fails (tts_unavailable, asr_unavailable) and /health says so.",
)
@click.option(
    "--lockstep-yield-ms",
    "duplex_yield_ms",
    default=_default("duplex_yield_ms"),
    show_default=True,
    type=click.FloatRange(1),
    help="A lockstep (native full-duplex) voice model (moshi) has yielded its turn after this long not "
    "speaking: its response ends completed (shorter cuts answers at pauses; longer holds the turn past "
    "them).",
)
@click.option(
    "--lockstep-realtime-headroom",
    "duplex_realtime_headroom",
    default=_default("duplex_realtime_headroom"),
    show_default=True,
    type=click.FloatRange(0),
    help="Admit a lockstep voice session only while the model's measured batched step takes at "
    "most this share of its frame period (0: admit up to the model's slots).",
)
@click.option(
    "--mcp-allowed-hosts",
    default=None,
    help="Comma list of hosts (host or host:port) a voice session's remote MCP tools ({type: mcp}) "
    "may reach. The client picks the server_url, so by default every one is refused.",
)
@click.option(
    "--mcp-timeout",
    "mcp_timeout_s",
    default=_default("mcp_timeout_s"),
    show_default=True,
    type=click.FloatRange(0.1),
    help="Seconds one MCP request (listing a server's tools, or one tool call) may take; then that "
    "listing or call fails with a clear error and the response goes on.",
)
@click.option(
    "--world-workers",
    default=_default("world_workers"),
    show_default=True,
    type=click.IntRange(0),
    help="World model workers: 0 steps it in this process, on one core; N starts N Ray actors, each "
    "its own process and core (needs livegen[ray]; on a shared 2-core machine one process admitted 4 "
    "page tiny-world sessions at 15.9 fps or more, and 2 workers did no better: docs/capacity.md). "
    "With --workers > 1 or --ray-address the model is "
    "loaded once per cluster, in max(1, N) shared actors that every server process calls (0 means 1).",
)
@click.option(
    "--world-realtime-headroom",
    default=_default("world_realtime_headroom"),
    show_default=True,
    type=click.FloatRange(0),
    help="Admit a realtime world session only while the batch that would include it needs at most "
    "this share of a worker's time (step times measured per batch size; asap sessions are not "
    "charged; 0: no frame-clock admission).",
)
@click.option(
    "--ray-address",
    envvar="RAY_ADDRESS",
    default=None,
    help="Ray cluster to join, e.g. 'head:6379' or 'auto': this server's processes register there and "
    "resume any process's sessions (one per machine, all behind one proxy: docs/scaling.md); "
    "--world-workers are placed there [default: a local Ray, started only for --workers > 1 or "
    "--world-workers].",
)
@click.option(
    "--workers",
    default=_default("workers"),
    show_default=True,
    type=click.IntRange(1, 256),
    help="Server processes on the one port (SO_REUSEPORT), each its own event loop, sharing "
    "--max-sessions through a local Ray. One process's loop is the ceiling (about 50 us of CPU per "
    "wire event: 200-300 streaming voice sessions): use about one per core when one process's CPU "
    "nears 100%. Each loads its own voice model (docs/capacity.md).",
)
@click.option(
    "--drain-timeout",
    "drain_timeout_s",
    default=_default("drain_timeout_s"),
    show_default=True,
    type=click.FloatRange(0),
    help="On SIGTERM: refuse new sessions (/health 503 draining), let live ones finish for this many "
    "seconds, then end the rest with session.closed (server_shutdown).",
)
@click.option(
    "--voice-model-path",
    default=None,
    type=click.Path(exists=True, file_okay=False),
    help="Directory of voice-model weights (moshi: the transformers layout with a SHA256SUMS file); "
    "never downloaded.",
)
@click.option(
    "--voice-dtype",
    default=_default("voice_dtype"),
    show_default=True,
    type=click.Choice(["auto", "float32", "bfloat16", "float16"]),
    help="Dtype of --voice-model-path weights; auto: bfloat16 on a GPU, float32 on the CPU.",
)
@click.option(
    "--voice-device",
    default=_default("voice_device"),
    show_default=True,
    help="Device of the voice model: auto, cpu, cuda, cuda:1.",
)
@click.option(
    "--world-model-path",
    default=None,
    type=click.Path(exists=True, file_okay=False),
    help="Directory of world-model weights (causal-wan: the Wan 2.1 diffusers layout); never downloaded.",
)
@click.option(
    "--world-dtype",
    default=_default("world_dtype"),
    show_default=True,
    type=click.Choice(["auto", "float32", "bfloat16", "float16"]),
    help="Dtype of --world-model-path weights; auto: bfloat16 on a GPU, float32 on the CPU.",
)
@click.option(
    "--world-device",
    default=_default("world_device"),
    show_default=True,
    help="Device of the world model: auto, cpu, cuda, cuda:1.",
)
@click.option(
    "--world-frames-per-chunk",
    default=None,
    type=click.IntRange(1, 16),
    help="Frames per chunk of a world model that generates frame by frame (tiny-world): 1 or 2 answer "
    "input sooner, at more per-chunk work; a session may ask for shorter ones (session.update "
    "frames_per_chunk; the page asks for 1); see docs/world-models.md [default: the model's own, 4].",
)
@click.option(
    "--world-recordings",
    default=None,
    type=click.Path(file_okay=False),
    help="Directory where world sessions that ask for it (session.update recording: true) are recorded: "
    "a video, an events log and the model, weights digest and seed, served at "
    "/v1/worlds/recordings/{id}; replay one with `livegen world replay` [default: off].",
)
@click.option(
    "--world-recordings-max-count",
    default=_default("world_recordings_max_count"),
    show_default=True,
    type=click.IntRange(1),
    help="Recordings kept; past it the oldest finished one is deleted.",
)
@click.option(
    "--world-recordings-max-mib",
    "world_recordings_max_bytes",
    default=_default("world_recordings_max_bytes") // (1024 * 1024),
    show_default=True,
    type=click.IntRange(1),
    callback=lambda _ctx, _param, mib: mib * 1024 * 1024,
    help="MiB all recordings take together; past it the oldest finished ones are deleted.",
)
@click.option(
    "--world-max-spectators-per-session",
    default=_default("world_max_spectators_per_session"),
    show_default=True,
    type=click.IntRange(0),
    help="Spectators (/v1/worlds?spectate=ID) one world session may have at once; more are refused.",
)
@click.option(
    "--world-max-spectators",
    default=_default("world_max_spectators"),
    show_default=True,
    type=click.IntRange(0),
    help="Spectators of all world sessions together; more are refused.",
)
@click.option(
    "--world-spectate-token-ttl",
    "world_spectate_token_ttl_s",
    default=_default("world_spectate_token_ttl_s"),
    show_default=True,
    type=click.FloatRange(1),
    help="Seconds a spectate token (session.spectate_token) lets spectators join.",
)
@cascade_options(_default)
@click.option(
    "--allowed-origins",
    default=None,
    help="Comma list of browser origins allowed (scheme://host[:port]), or '*'. "
    "[default: loopback origins without --api-key, any with one; the server's own page always]",
)
@edge_options(_default)
def serve(**options: Any) -> None:
    """Serve voice and world sessions over WebSockets, with the demo page at /."""
    from livegen.server.http.budgets import limit_malloc_arenas

    limit_malloc_arenas()  # before any model or server thread exists: arenas are taken per thread
    from livegen import logs
    from livegen.cluster import supervisor as workers
    from livegen.errors import ConfigError
    from livegen.server import create_app
    from livegen.server.http.origins import parse_list

    logs.configure(options["log_level"])
    options["allowed_origins"] = parse_list(options["allowed_origins"])
    options["allowed_hosts"] = parse_list(options["allowed_hosts"])
    options["mcp_allowed_hosts"] = tuple(
        host.lower() for host in parse_list(options["mcp_allowed_hosts"]) or ()
    )
    options["webrtc_ice_servers"] = parse_list(options["webrtc_ice_servers"]) or ()
    if options["llm_base_url"] and options["llm"] is None:  # the endpoint replaces the embedded model
        options["llm"] = "builtin"
    try:
        config = ServerConfig(**options)
        _check_recogniser(config)
        app = create_app(config)  # a bad option fails here, before anything listens or starts
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    workers.run(config, app=app)


def _check_recogniser(config: ServerConfig) -> None:
    """Check ``--asr-model`` and ``--asr-model-path`` now, so a wrong name or directory stops the
    server at startup by name, not when the voice model loads."""
    if config.asr_model is None and config.asr_model_path is None:
        return
    from livegen.models.cascade.model import check_asr_settings

    check_asr_settings(config.asr_model, config.asr_model_path)
