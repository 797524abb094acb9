"""``livegen models``: the registered models, their kind, and whether they can load here."""

from __future__ import annotations

import click


@click.command()
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
    from livegen.models.llm import weights

    click.echo(weights.status())
