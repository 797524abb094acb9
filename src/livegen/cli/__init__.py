"""The ``livegen`` command: every subcommand lives in this package, one module per command.

This package sits on top of everything else (nothing imports it; tests/test_layers.py
checks): ``serve.py`` (and ``serve_cascade.py``, ``serve_edge.py``, ``serve_help.py``) is the server's
command line, ``talk.py`` and ``world.py`` the clients' commands, ``replay.py``
``livegen world replay``, ``models.py`` the model list, ``train_world.py`` the training
command and ``bench.py`` the benchmarks' group. Every subcommand is named here by import
path and imported only when run (``lazy.py``), so ``livegen --help`` and ``livegen serve``
start fast. Add a tool by adding a line to ``TOOLS``, a benchmark by adding one to
``bench.py``'s ``BENCHES``.
"""

from __future__ import annotations

import sys

import click

from livegen.cli.lazy import LazyGroup

#: Subcommand name -> "module:click_command", loaded on use.
TOOLS: dict[str, str] = {
    "serve": "livegen.cli.serve:serve",
    "models": "livegen.cli.models:models",
    "talk": "livegen.cli.talk:talk",
    "world": "livegen.cli.world:world",
    "bench": "livegen.cli.bench:bench",
    "train-world": "livegen.cli.train_world:command",
}

#: Subcommands added to a tool's group when it loads: tool -> {name: "module:click_command"}.
SUBTOOLS: dict[str, dict[str, str]] = {"world": {"replay": "livegen.cli.replay:replay"}}


@click.group(
    cls=LazyGroup, lazy=TOOLS, subtools=SUBTOOLS, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(package_name="livegen")
def main() -> None:
    """livegen: a realtime session engine for streaming generative models.

    Voice sessions speak the OpenAI Realtime protocol at /v1/realtime; world
    sessions stream generated frames at /v1/worlds. Start with `livegen serve`
    and open http://127.0.0.1:8000/ in a browser.
    """


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
