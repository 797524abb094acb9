"""The ``livegen`` command: list models, and the lazily loaded tools (``serve`` among them).

Subcommands that pull in heavy modules (clients, training, benchmarks) are
named here by import path and imported only when run, so ``livegen --help``
and ``livegen serve`` start fast; ``serve`` and its many options are
``serve_cli.py``. Add a tool by adding a line to ``TOOLS`` or ``BENCHES``.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

#: Subcommand name -> "module:click_command", loaded on use.
TOOLS: dict[str, str] = {
    "serve": "livegen.serve_cli:serve",
    "talk": "livegen.client.talk_cli:talk",
    "world": "livegen.client.world_cli:world",
    "train-world": "livegen.training.tinyworld.train:command",
}

#: Subcommands added to a tool's group when it loads: tool -> {name: "module:click_command"}.
SUBTOOLS: dict[str, dict[str, str]] = {"world": {"replay": "livegen.runtime.world.replay_cli:replay"}}

#: ``livegen bench <name>`` -> "module:click_command", loaded on use.
BENCHES: dict[str, str] = {
    "voice-model": "livegen.bench.voice_model:command",
    "voice-duplex": "livegen.bench.voice_duplex:command",
    "voice-barge-in": "livegen.bench.voice_barge_in:command",
    "world-session": "livegen.bench.world_session:world_session",
    "voice-session": "livegen.bench.voice_session:voice_session",
    "world-workers": "livegen.bench.world_workers:world_workers",
    "world-model": "livegen.bench.world_model:command",
    "world-stream": "livegen.bench.world_stream:command",
    "voice-conversations": "livegen.bench.voice_conversations:command",
    "voice-faults": "livegen.bench.voice_faults:command",
    "churn": "livegen.bench.churn:command",
    "voice-webrtc": "livegen.bench.voice_webrtc:command",
    "voice-tools": "livegen.bench.voice_tools:command",
    "voice-preambles": "livegen.bench.voice_preambles:command",
    "fuzz": "livegen.bench.fuzz:command",
    "audio-api": "livegen.bench.audio_api:command",
    "voice-live": "livegen.bench.voice_live:command",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported only when invoked or listed in help."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy if lazy is not None else {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            command = _load(self.lazy[cmd_name])
            if isinstance(command, click.Group):
                for name, target in SUBTOOLS.get(cmd_name, {}).items():
                    command.add_command(_load(target), name)
            return command
        return super().get_command(ctx, cmd_name)


def _load(target: str) -> click.Command:
    module_name, _, attribute = target.partition(":")
    command: click.Command = getattr(importlib.import_module(module_name), attribute)
    return command


@click.group(cls=LazyGroup, lazy=TOOLS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="livegen")
def main() -> None:
    """livegen: a realtime session engine for streaming generative models.

    Voice sessions speak the OpenAI Realtime protocol at /v1/realtime; world
    sessions stream generated frames at /v1/worlds. Start with `livegen serve`
    and open http://127.0.0.1:8000/ in a browser.
    """


@main.command()
def models() -> None:
    """List the registered models, their kind, and whether they can load here."""
    from livegen.models import Kind, default_registry

    registry = default_registry()
    entries = registry.entries()
    if not entries:
        click.echo("no models registered")
        return
    defaults = {registry.default(kind) for kind in Kind}
    for entry in entries:
        status = "available" if entry.is_available() else f"needs {', '.join(entry.missing())}"
        marker = " (default)" if entry in defaults else ""
        click.echo(f"{entry.name:<20} {entry.kind.value:<6} {status}{marker}  {entry.description}")


@main.group(cls=LazyGroup, lazy=BENCHES)
def bench() -> None:
    """Benchmarks: each prints medians and ratios against a baseline run in the same process."""


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
