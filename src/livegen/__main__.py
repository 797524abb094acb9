"""``python -m livegen``: the same as the ``livegen`` command."""

from livegen.cli import main

main()
