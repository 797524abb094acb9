"""``livegen serve``'s help groups, ``--config FILE`` and its old flag names.

The server has many options, one per ``ServerConfig`` setting; one flat ``--help`` of them
all was a manual nobody read. Here they are sorted into groups by the settings they feed
(vLLM's ``--help=<group>``): plain ``--help`` shows the common ones and names the groups,
``--help GROUP`` shows one group and ``--help all`` every option. The option definitions stay
in ``serve.py`` (and the modules it takes two concerns' options from), unchanged in shape;
``GROUPS`` names each by its parameter name, and an option that is in no group is a common one.

``--config FILE`` reads any option from a TOML file, keyed by the flag without its dashes
(``world-workers = 2``); the file fills click's ``default_map``, so a flag or an option's
environment variable given beside it wins (click's order: flag, variable, file, default).
A key that names no option stops the server with that key's name.

``ALIASES`` keeps old flag names working, hidden from the help: the native full-duplex
models are "lockstep" models, and "duplex" names only vllm-omni's wire dialect.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import click

#: Group name -> (what it holds, the parameter names of its options), as ``--help GROUP`` lists them.
GROUPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "voice": (
        "voice sessions: resume, parking, dtype, remote MCP tools, lockstep models",
        (
            "resume_grace_s",
            "max_parked_sessions",
            "max_parked_bytes",
            "voice_dtype",
            "mcp_allowed_hosts",
            "mcp_timeout_s",
            "duplex_yield_ms",
            "duplex_realtime_headroom",
        ),
    ),
    "cascade": (
        "the cascade voice model: recognisers, detector, speech workers, remote speech endpoints",
        (
            "asr_model",
            "asr_model_path",
            "vad",
            "tts_workers",
            "tts_threads",
            "asr_batch",
            "asr_workers",
            "asr_threads",
            "tts_base_url",
            "tts_api_key",
            "tts_model",
            "asr_base_url",
            "asr_api_key",
            "asr_remote_model",
            "speech_timeout_s",
        ),
    ),
    "llm": (
        "the language model: the embedded one's threads, context, parallel conversations; limits, timeouts",
        (
            "llm_context_tokens",
            "llm_threads",
            "llm_context",
            "llm_parallel",
            "llm_first_token_s",
            "llm_answer_s",
            "llm_max_line_kib",
            "llm_max_arguments_kib",
            "llm_max_text_kib",
            "llm_max_tool_calls",
        ),
    ),
    "world": (
        "world sessions: dtype, chunks, admission, spectators",
        (
            "world_dtype",
            "world_frames_per_chunk",
            "world_realtime_headroom",
            "world_max_spectators_per_session",
            "world_max_spectators",
            "world_spectate_token_ttl_s",
        ),
    ),
    "recordings": (
        "world session recordings: where, how many, how large",
        ("world_recordings", "world_recordings_max_count", "world_recordings_max_bytes"),
    ),
    "cluster": ("scale-out: world model workers, a Ray cluster", ("world_workers", "ray_address")),
    "http": (
        "the HTTP and WebSocket edge: hosts, connections, heads, bodies, timeouts, key mints",
        (
            "allowed_hosts",
            "max_connections",
            "max_unsent_bytes",
            "first_message_timeout_s",
            "keep_alive_timeout_s",
            "max_header_bytes",
            "header_timeout_s",
            "max_body_bytes",
            "body_timeout_s",
            "max_client_secret_bytes",
        ),
    ),
    "audio": (
        "OpenAI's audio API (/v1/audio/*): upload sizes, requests at once",
        ("max_audio_bytes", "max_audio_s", "max_audio_requests"),
    ),
    "webrtc": ("WebRTC calls: ICE servers, calls at once", ("webrtc_ice_servers", "webrtc_max_calls")),
    "tls": ("TLS: https:// and wss://", ("ssl_certfile", "ssl_keyfile")),
}
#: ``--help all``: every option, common and grouped.
ALL = "all"

#: Old flag -> its name now; the old one still works, hidden from the help.
ALIASES: dict[str, str] = {
    "--duplex-yield-ms": "--lockstep-yield-ms",
    "--duplex-realtime-headroom": "--lockstep-realtime-headroom",
}

_GROUP = "livegen.help_group"  # ctx.meta key: the group a --help GROUP asked for


def _grouped() -> set[str]:
    return {name for _, names in GROUPS.values() for name in names}


def unalias(args: list[str]) -> list[str]:
    """``args`` with each old flag (``--old`` or ``--old=VALUE``) spelled as its new name."""
    out = []
    for arg in args:
        flag, equals, value = arg.partition("=")
        out.append(ALIASES[flag] + equals + value if flag in ALIASES else arg)
    return out


def help_group(args: list[str]) -> str | None:
    """The group of a ``--help GROUP`` (or ``--help=GROUP``) in ``args``; None for a plain help."""
    for at, arg in enumerate(args):
        flag, equals, value = arg.partition("=")
        if flag not in ("--help", "-h"):
            continue
        if not equals:
            value = args[at + 1] if at + 1 < len(args) and not args[at + 1].startswith("-") else ""
        if not value:
            return None
        if value != ALL and value not in GROUPS:
            raise click.UsageError(f"no option group {value!r}: one of {', '.join([*GROUPS, ALL])}")
        return value
    return None


class ServeCommand(click.Command):
    """``livegen serve``: old flags unaliased, ``--help GROUP`` shown, the common options in ``--help``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        args = unalias(args)
        group = help_group(args)
        if group is not None:
            ctx.meta[_GROUP] = group
            click.echo(ctx.get_help(), color=ctx.color)
            ctx.exit()
        return super().parse_args(ctx, args)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        group = ctx.meta.get(_GROUP)
        if group in GROUPS:
            names = set(GROUPS[group][1])
            title = f"Options: {group} ({GROUPS[group][0]})"
        else:
            grouped = set() if group == ALL else _grouped()
            names = {p.name for p in self.get_params(ctx) if p.name not in grouped}
            title = "Options" if group is None else "Options: all"
        records = [r for p in self.get_params(ctx) if p.name in names and (r := p.get_help_record(ctx))]
        with formatter.section(title):
            formatter.write_dl(records)
        if group is None:
            with formatter.section("More options: livegen serve --help GROUP (or all)"):
                formatter.write_dl([(name, text) for name, (text, _) in GROUPS.items()])


def config_option(command: Any) -> Any:
    """The ``--config FILE`` option, read before every other (it fills their defaults)."""
    return click.option(
        "--config",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        is_eager=True,
        expose_value=False,
        callback=_read_config,
        help="TOML file of any options, keyed by the flag without its dashes (world-workers = 2); "
        "flags and environment variables given beside it win.",
    )(command)


def _read_config(ctx: click.Context, param: click.Parameter, path: Path | None) -> None:
    if path is None:
        return
    try:
        settings = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise click.BadParameter(f"{path}: {exc}", ctx, param) from exc
    names = _option_names(ctx.command)
    defaults = dict(ctx.default_map or {})
    for key, value in settings.items():
        flag = "--" + key.replace("_", "-")
        name = names.get(ALIASES.get(flag, flag))
        if name is None:
            raise click.BadParameter(f"unknown key {key!r} in {path}: no such option", ctx, param)
        defaults[name] = value
    ctx.default_map = defaults


def _option_names(command: click.Command) -> dict[str, str]:
    """Each long flag a file may set -> its parameter's name (not --config or --help)."""
    return {
        opt: param.name
        for param in command.params
        if param.name and param.name not in ("config", "help") and isinstance(param, click.Option)
        for opt in param.opts
        if opt.startswith("--")
    }
