"""docs/architecture.md's promises and the tests that prove them stay in step.

Every test the promise tables name exists; every invariant of the two
Hypothesis machines is named after a promise the tables list (``v3_...``,
``w7_...``) and names it in its docstring; and nothing in the project cites
a file outside the repository.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
MACHINES = [
    ROOT / "tests" / "voice" / "test_session_machine.py",
    ROOT / "tests" / "world" / "test_session_machine.py",
]


def promise_rows() -> dict[str, str]:
    rows = {}
    for line in DOC.read_text().splitlines():
        match = re.match(r"\| ([VW]\d+) \|", line)
        if match:
            rows[match.group(1)] = line
    return rows


def cited_tests() -> list[tuple[str, str]]:
    """(file, test) pairs the tables cite; ``::name`` after a file cites another test in it."""
    cited = []
    for row in promise_rows().values():
        current = ""
        for path, name, more in re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`|`::(\w+)`", row):
            current = path or current
            if name or more:
                cited.append((current, name or more))
    return cited


def invariants(machine: Path) -> dict[str, str]:
    """Each ``@invariant()`` method's name and docstring."""
    found = {}
    for node in ast.walk(ast.parse(machine.read_text())):
        if isinstance(node, ast.FunctionDef) and any(
            isinstance(d, ast.Call) and getattr(d.func, "id", "") == "invariant" for d in node.decorator_list
        ):
            found[node.name] = ast.get_docstring(node) or ""
    return found


def test_the_promises_are_numbered_in_order() -> None:
    numbers = list(promise_rows())
    voice = [n for n in numbers if n[0] == "V"]
    world = [n for n in numbers if n[0] == "W"]
    assert voice == [f"V{i}" for i in range(1, len(voice) + 1)] and len(voice) >= 6
    assert world == [f"W{i}" for i in range(1, len(world) + 1)] and len(world) >= 6


@pytest.mark.parametrize(("path", "name"), cited_tests())
def test_every_cited_test_exists(path: str, name: str) -> None:
    assert re.search(rf"^\s*(async )?def {name}\(", (ROOT / path).read_text(), re.MULTILINE), (
        f"{path}::{name}"
    )


@pytest.mark.parametrize("machine", MACHINES, ids=lambda p: p.parent.name)
def test_every_invariant_is_named_after_its_promises(machine: Path) -> None:
    rows = promise_rows()
    found = invariants(machine)
    assert found
    for name, doc in found.items():
        numbers = [n.upper() for n in re.findall(r"(?:^|_)([vw]\d+)(?=_)", name)]
        assert numbers, f"{name}: not named after a promise"
        for number in numbers:
            assert number in rows, f"{name}: {number} is not in docs/architecture.md"
            assert number in doc, f"{name}: its docstring does not name {number}"
        machine_name = f"`{name}`"
        assert any(machine_name in rows[n] for n in numbers), f"{name}: not cited by its promise"


def test_nothing_cites_a_file_outside_the_repository() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "src", "tests", "docs", "README.md"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    this = Path(__file__).relative_to(ROOT).as_posix()
    outside = re.compile(r"DESIGN\.md|/work/")
    hits = [
        f"{path}:{number}"
        for path in tracked
        if path != this and (ROOT / path).suffix in {".py", ".md", ".js", ".html", ".toml"}
        for number, line in enumerate((ROOT / path).read_text(errors="replace").splitlines(), 1)
        if outside.search(line)
    ]
    assert not hits, "references to files outside the repository:\n" + "\n".join(hits)
