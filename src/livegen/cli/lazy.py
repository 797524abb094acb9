"""``LazyGroup``: a click group whose subcommands are named by import path and imported on use.

``livegen --help`` lists every tool and benchmark without importing one, so the command starts
fast and a tool whose extra is missing fails only when it is run (``cli/__init__.py``'s
``TOOLS``, ``cli/bench.py``'s ``BENCHES``).
"""

from __future__ import annotations

import importlib
from typing import Any

import click


class LazyGroup(click.Group):
    """A click group whose subcommands are imported only when invoked or listed in help.

    ``lazy``: name -> "module:click_command"; ``aliases``: an old name -> its name now, run but
    not listed; ``subtools``: a lazy group's name -> its own lazy subcommands, added on load.
    """

    def __init__(
        self,
        *args: Any,
        lazy: dict[str, str] | None = None,
        aliases: dict[str, str] | None = None,
        subtools: dict[str, dict[str, str]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy if lazy is not None else {}
        self.aliases = aliases if aliases is not None else {}
        self.subtools = subtools if subtools is not None else {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        cmd_name = self.aliases.get(cmd_name, cmd_name)
        if cmd_name in self.lazy:
            command = load(self.lazy[cmd_name])
            if isinstance(command, click.Group):
                for name, target in self.subtools.get(cmd_name, {}).items():
                    command.add_command(load(target), name)
            return command
        return super().get_command(ctx, cmd_name)


def load(target: str) -> click.Command:
    """The click command a "module:attribute" path names."""
    module_name, _, attribute = target.partition(":")
    command: click.Command = getattr(importlib.import_module(module_name), attribute)
    return command
