"""Training stays apart from serving: nothing that serves imports ``livegen.training``.

A training change (data, loss, export) must not be able to break a server.
Checked two ways: statically, no module outside ``training/`` (but the
``livegen`` command's lazy table and the benches, which are tools) names it in
an import; and at run time, loading the served tiny-world through the registry
and building the app leaves ``livegen.training`` unimported.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "livegen"
TOOLS = ("training", "bench")
#: ``livegen train-world``'s command: a tool, loaded by the command's lazy table only when run.
TOOL_FILES = ("cli/train_world.py",)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_serving_module_imports_training() -> None:
    serving = [
        p
        for p in SRC.rglob("*.py")
        if p.relative_to(SRC).parts[0] not in TOOLS and p.relative_to(SRC).as_posix() not in TOOL_FILES
    ]
    assert any(p.relative_to(SRC).parts[:2] == ("models", "tinyworld") for p in serving)
    offenders = {
        str(p.relative_to(SRC)): sorted(n for n in _imports(p) if n.startswith("livegen.training"))
        for p in serving
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_walk_sees_an_import_of_training(tmp_path: Path) -> None:
    """The check above would catch one: the walk finds both import forms, nested ones too."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import livegen.training.tinyworld.data\ndef f():\n    from livegen.training import tinyworld\n"
    )
    assert _imports(probe) >= {"livegen.training.tinyworld.data", "livegen.training"}


def test_serving_tiny_world_loads_no_training_module() -> None:
    pytest.importorskip("torch")
    script = (
        "import sys\n"
        "from livegen.models import Kind, default_registry\n"
        "import livegen.server.app\n"
        "registry = default_registry()\n"
        "models = [registry.load(name) for name in ('tiny-world', 'procedural-world')]\n"
        "assert registry.default(Kind.WORLD).name == 'tiny-world'\n"
        "print(sorted(name for name in sys.modules if name.startswith('livegen.training')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "[]"
