"""Cancellation reaches every task of ours: no ``asyncio.wait_for`` in ``src/livegen``.

On Python 3.11 (the oldest we support) ``asyncio.wait_for`` returns the awaited
result and drops a cancel that lands as that result arrives. A loop that waits
for a wake-up with it then runs on after ``cancel()``: the world scheduler's
``stop`` never returned while sessions kept waking it
(``tests/runtime/world/test_scheduler.py``). ``asyncio.timeout`` does not drop
cancels, so the source uses it, and this walk keeps ``wait_for`` out.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "livegen"


def _wait_for_calls(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "wait_for"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "asyncio"
    ]


def test_the_walk_finds_a_wait_for(tmp_path: Path) -> None:
    source = tmp_path / "example.py"
    source.write_text("import asyncio\n\nasync def f(e):\n    await asyncio.wait_for(e.wait(), 1)\n")
    assert _wait_for_calls(source) == [4]


def test_no_asyncio_wait_for_in_the_source() -> None:
    found = [
        f"{path.relative_to(SRC)}:{line}" for path in SRC.rglob("*.py") for line in _wait_for_calls(path)
    ]
    assert not found, f"use `async with asyncio.timeout(...)` instead of asyncio.wait_for: {found}"
