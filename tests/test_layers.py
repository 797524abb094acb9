"""The layer rules of docs/architecture.md, checked on the source tree.

Two kinds of check. The sans-IO ban (no asyncio, clock, randomness, uuid or
threads in the cores) is ruff's banned-api (TID251), configured in
pyproject.toml; the tests below prove the configuration is in force. Which
layer may import which is an AST walk over every import in ``src/livegen``
(inside functions and ``TYPE_CHECKING`` blocks too, the string literal of an
``importlib.import_module`` call, and a ``"livegen.module:attribute"`` string,
as the catalog names its loaders), judged by one table, ``RULES``.

Function length is checked here too: nothing that serves has a function over
``MAX_FUNCTION_LINES`` lines.

Both checks carry an allow-list of what is wrong today and being fixed under
issue #12; an entry that is no longer needed fails the test too, so the lists
only shrink.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
RUFF = [sys.executable, "-m", "ruff"] if shutil.which("ruff") is None else ["ruff"]

# --- the sans-IO ban (ruff TID251) -----------------------------------------------------


def _ruff_on(path: str, source: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RUFF, "check", "--no-cache", "--select", "TID251", "--stdin-filename", path, "-"],
        input=source,
        text=True,
        capture_output=True,
        cwd=ROOT,
    )


@pytest.mark.parametrize("core", ["world", "voice", "protocol"])
@pytest.mark.parametrize("module", ["asyncio", "time", "random", "uuid", "threading"])
def test_sans_io_cores_refuse_io_modules(core: str, module: str) -> None:
    result = _ruff_on(f"src/livegen/{core}/probe.py", f"import {module}\n")
    assert result.returncode == 1
    assert "TID251" in result.stdout and module in result.stdout


def test_from_import_is_refused_too() -> None:
    result = _ruff_on("src/livegen/world/probe.py", "from asyncio import Queue\n")
    assert result.returncode == 1


@pytest.mark.parametrize("layer", ["runtime", "server"])
def test_io_layers_may_use_asyncio(layer: str) -> None:
    result = _ruff_on(f"src/livegen/{layer}/probe.py", "import asyncio\n")
    assert result.returncode == 0, result.stdout


# --- which layer imports which ---------------------------------------------------------

CORES = ("livegen.protocol", "livegen.voice", "livegen.world")
CONTRACTS = ("livegen.models.voice", "livegen.models.world", "livegen.models.controls")
#: The training package: shipped for `livegen train-world`, never imported by what serves.
TRAINING = ("livegen.training",)
#: Scale-out: every module that runs livegen over many processes, and Ray (issue 38).
CLUSTER = ("livegen.cluster",)
#: The command line: every ``livegen`` command, on top of everything (issue 38).
CLI = ("livegen.cli", "livegen.__main__")
#: What does not serve: the load generators, the command line, the training code.
NOT_SERVING = ("livegen.bench", *CLI, *TRAINING)


@dataclass(frozen=True)
class Rule:
    """Modules under ``importers`` (less ``exempt``) import nothing under ``forbidden``
    (less ``allowed``). Names are dotted prefixes, matched on whole components."""

    importers: tuple[str, ...]
    forbidden: tuple[str, ...]
    reason: str
    allowed: tuple[str, ...] = ()
    exempt: tuple[str, ...] = ()


RULES: tuple[Rule, ...] = (
    Rule(
        CORES,
        ("livegen.runtime", "livegen.server", "livegen.cluster", "livegen.client", "livegen.bench"),
        "a sans-IO core is driven by the runtime and the transports, never the other way round",
    ),
    Rule(
        CORES,
        ("livegen.models",),
        "a sans-IO core knows models only by their contracts",
        allowed=CONTRACTS,
    ),
    Rule(
        ("livegen.models",),
        ("livegen.runtime", "livegen.server", "livegen.client", "livegen.bench"),
        "a model knows nothing of the loop that drives it or the wire it is served on",
    ),
    Rule(
        ("livegen.runtime",),
        ("livegen.server", "livegen.client", "livegen.bench"),
        "engines do not know their transports; transports call engines",
    ),
    Rule(
        ("livegen.server",),
        ("livegen.models", "livegen.client", "livegen.bench"),
        "server/ knows models only through the registry and the contracts",
        allowed=(
            "livegen.models.__init__",  # re-exports the registry and the catalog only
            "livegen.models.registry",
            "livegen.models.catalog",
            *CONTRACTS,
        ),
    ),
    Rule(
        ("livegen.models.__init__",),
        ("livegen.models",),
        "server/ imports the models package, so it re-exports only the registry, catalog and contracts",
        allowed=("livegen.models.registry", "livegen.models.catalog", *CONTRACTS),
    ),
    Rule(
        ("livegen.client",),
        ("livegen.runtime", "livegen.server", "livegen.cluster", "livegen.bench"),
        "a client is a peer over the wire: it shares protocol/ with the server, nothing else",
    ),
    Rule(
        ("livegen",),
        TRAINING,
        "nothing that serves imports training code: a training change must not break serving",
        exempt=NOT_SERVING,
    ),
    Rule(
        ("livegen.server",),
        ("livegen.runtime.world.runner", "livegen.runtime.world.sender", "livegen.world"),
        "a world transport hands its socket to the engine's session owner (runtime/world/owner.py); "
        "the runner, its sender and the sans-IO core are the engine's (issue 24)",
    ),
    Rule(
        ("livegen.server",),
        ("livegen.runtime.voice.runner", "livegen.voice"),
        "a voice transport hands its link to the engine's session owner, and checks a key's or a "
        "call's configuration through the engine (configured_session), never the runner or the core",
    ),
    Rule(
        ("livegen.models",),
        ("livegen.world", "livegen.voice"),
        "a model describes its controls with the contracts (models/controls.py), never the cores that "
        "check them: models/ and world/ import each other only through the contracts (issue 24)",
    ),
    Rule(
        ("livegen",),
        ("livegen.cli",),
        "cli/ sits on top: it parses a command's options and calls the layers below, which never "
        "import a command (issue 38)",
        exempt=CLI,
    ),
    Rule(
        ("livegen.models", "livegen.runtime"),
        CLUSTER,
        "a model and its engine do not know whether they are scaled out: cluster/ offers its "
        "services to them, chosen once from the configuration (issue 38)",
    ),
)

#: Imports that break a rule today, each being fixed under issue #12 by another branch.
#: The lead deletes an entry when merging its fix (a stale entry fails the test).
KNOWN_VIOLATIONS: frozenset[tuple[str, str]] = frozenset()


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@dataclass(frozen=True)
class Import:
    path: Path
    line: int
    importer: str
    imported: str


@dataclass(frozen=True)
class Violation:
    where: Import
    rule: Rule

    def __str__(self) -> str:
        w = self.where
        return f"{w.path}:{w.line}: {w.importer} -> {w.imported}: {self.rule.reason}"


def _module_name(path: Path, src: Path) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts)


def _is_module(name: str, src: Path) -> bool:
    base = src.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _resolve(node: ast.ImportFrom, importer: str) -> str:
    if not node.level:
        return node.module or ""
    package = importer.split(".")[:-1]  # a package's own module is ``pkg.__init__``
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


#: A lazy import by name, as the catalog's loaders and the CLI's commands are written.
LAZY = re.compile(r"livegen(\.\w+)+:\w+$")


def _canonical(name: str, src: Path) -> str:
    """A package stands for its ``__init__`` module, so rules can tell it from its submodules."""
    return f"{name}.__init__" if (src.joinpath(*name.split(".")) / "__init__.py").is_file() else name


def _imported_names(node: ast.AST, importer: str, src: Path) -> Iterator[str]:
    """The modules one statement imports: ``from pkg import mod`` names ``pkg.mod``;
    ``from pkg import name`` names ``pkg`` (its ``__init__``)."""
    if isinstance(node, ast.Import):
        yield from (_canonical(alias.name, src) for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = _resolve(node, importer)
        for alias in node.names:
            full = f"{base}.{alias.name}"
            yield _canonical(full if _is_module(full, src) else base, src)
    elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "import_module" and isinstance(node.args[0].value, str):
            yield _canonical(node.args[0].value, src)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and LAZY.match(node.value):
        yield _canonical(node.value.partition(":")[0], src)


def imports_of(src: Path) -> Iterator[Import]:
    """Every import of a ``livegen`` module anywhere in the tree under ``src``."""
    for path in sorted((src / "livegen").rglob("*.py")):
        importer = _module_name(path, src)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for name in dict.fromkeys(_imported_names(node, importer, src)):
                if _under(name, ("livegen",)):
                    yield Import(path.relative_to(src.parent), getattr(node, "lineno", 0), importer, name)


def violations(src: Path) -> list[Violation]:
    found = []
    for imp in imports_of(src):
        for rule in RULES:
            if not _under(imp.importer, rule.importers) or _under(imp.importer, rule.exempt):
                continue
            if _under(imp.imported, rule.forbidden) and not _under(imp.imported, rule.allowed):
                found.append(Violation(imp, rule))
    return found


def test_layer_rules_hold() -> None:
    found = violations(SRC)
    new = [v for v in found if (v.where.importer, v.where.imported) not in KNOWN_VIOLATIONS]
    assert not new, "layer rules broken (docs/architecture.md):\n" + "\n".join(map(str, new))


def test_known_violations_are_still_there() -> None:
    """An allow-list entry whose import is gone must go too, or the list only grows."""
    found = {(v.where.importer, v.where.imported) for v in violations(SRC)}
    stale = sorted(KNOWN_VIOLATIONS - found)
    assert not stale, "fixed: delete from KNOWN_VIOLATIONS in tests/test_layers.py:\n" + "\n".join(
        f"{a} -> {b}" for a, b in stale
    )


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name in (
        "livegen",
        "livegen/voice",
        "livegen/server",
        "livegen/runtime",
        "livegen/models",
        "livegen/client",
        "livegen/bench",
        "livegen/cli",
        "livegen/cluster",
    ):
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "__init__.py").write_text("")
    for relative, source in files.items():
        (tmp_path / relative).write_text(source)
    return tmp_path


WRONG_IMPORTS = [
    ("livegen/voice/probe.py", "from livegen.runtime import engine\n", "livegen.runtime.engine", 0),
    ("livegen/voice/probe.py", "def f():\n    from ..server import app\n", "livegen.server.app", 0),
    (
        "livegen/voice/probe.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import livegen.runtime.engine\n",
        "livegen.runtime.engine",
        0,
    ),
    (
        "livegen/voice/probe.py",
        "import importlib\nimportlib.import_module('livegen.server.app')\n",
        "livegen.server.app",
        0,
    ),
    ("livegen/voice/probe.py", "from livegen.models.cascade import x\n", "livegen.models.cascade", 1),
    ("livegen/models/probe.py", "from livegen.server.app import State\n", "livegen.server.app", 2),
    ("livegen/models/probe.py", "LOADER = 'livegen.training.data:load'\n", "livegen.training.data", 7),
    ("livegen/runtime/probe.py", "import livegen.server.app\n", "livegen.server.app", 3),
    ("livegen/server/probe.py", "from livegen.models.cascade import x\n", "livegen.models.cascade", 4),
    ("livegen/server/probe.py", "from livegen.models import cascade\n", "livegen.models.cascade", 4),
    ("livegen/models/__init__.py", "from .cascade import x\n", "livegen.models.cascade", 5),
    ("livegen/client/probe.py", "from livegen.runtime.engine import x\n", "livegen.runtime.engine", 6),
    ("livegen/runtime/probe.py", "from livegen.training.data import Clip\n", "livegen.training.data", 7),
    (
        "livegen/server/probe.py",
        "from livegen.runtime.world.runner import Runner\n",
        "livegen.runtime.world.runner",
        8,
    ),
    ("livegen/server/probe.py", "from livegen.world import Status\n", "livegen.world", 8),
    ("livegen/server/probe.py", "from livegen.voice.session import Limits\n", "livegen.voice.session", 9),
    (
        "livegen/server/probe.py",
        "from livegen.runtime.voice.runner import Runner\n",
        "livegen.runtime.voice.runner",
        9,
    ),
    ("livegen/models/probe.py", "from livegen.world.schema import KEYS_V1\n", "livegen.world.schema", 10),
    ("livegen/server/probe.py", "from livegen.cli.serve import serve\n", "livegen.cli.serve", 11),
    ("livegen/bench/probe.py", "COMMAND = 'livegen.cli.talk:talk'\n", "livegen.cli.talk", 11),
    (
        "livegen/runtime/probe.py",
        "from livegen.cluster.speech import connect\n",
        "livegen.cluster.speech",
        12,
    ),
    ("livegen/models/probe.py", "def f():\n    import livegen.cluster.ray\n", "livegen.cluster.ray", 12),
    ("livegen/voice/probe.py", "from livegen.cluster.mode import x\n", "livegen.cluster.mode", 0),
]


@pytest.mark.parametrize(("path", "source", "imported", "rule"), WRONG_IMPORTS)
def test_a_wrong_import_is_reported(tmp_path: Path, path: str, source: str, imported: str, rule: int) -> None:
    src = _tree(
        tmp_path,
        {
            "livegen/runtime/engine.py": "",
            "livegen/server/app.py": "",
            "livegen/models/cascade.py": "",
            path: source,
        },
    )
    found = violations(src)
    assert [(v.where.imported, v.rule) for v in found] == [(imported, RULES[rule])]
    importer = path.removesuffix(".py").replace("/", ".")
    assert str(found[0]).endswith(
        f"/{path}:{found[0].where.line}: {importer} -> {imported}: {RULES[rule].reason}"
    )


RIGHT_IMPORTS = [
    ("livegen/voice/probe.py", "from livegen.models.voice import VoiceModel\n"),
    ("livegen/server/probe.py", "from livegen.models import Registry\nfrom livegen.runtime import engine\n"),
    ("livegen/server/probe.py", "from livegen.models.registry import Kind\n"),
    ("livegen/bench/probe.py", "from livegen.training import data\n"),
    ("livegen/cli/probe.py", "def train():\n    from livegen.training.loop import train\n"),
    ("livegen/cli/probe.py", "from livegen.server.app import State\nfrom livegen.cli import main\n"),
    ("livegen/cluster/probe.py", "from livegen.runtime import engine\nfrom livegen.models import voice\n"),
    ("livegen/cli/probe.py", "from livegen.cluster import supervisor\n"),
]


@pytest.mark.parametrize(("path", "source"), RIGHT_IMPORTS)
def test_an_allowed_import_passes(tmp_path: Path, path: str, source: str) -> None:
    src = _tree(tmp_path, {"livegen/runtime/engine.py": "", path: source})
    assert violations(src) == []


# --- Ray, in cluster/ only ------------------------------------------------------------


def _imports_ray(node: ast.AST) -> bool:
    """``import ray``, ``from ray... import``, or ``importlib.import_module("ray...")``."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and not node.level:
        names = [node.module or ""]
    elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "import_module" and isinstance(node.args[0].value, str):
            names = [node.args[0].value]
    return any(n == "ray" or n.startswith("ray.") for n in names)


def ray_imports(src: Path) -> list[str]:
    """Where a module outside ``cluster/`` imports Ray (anywhere: lazily, under TYPE_CHECKING)."""
    found = []
    for path in sorted((src / "livegen").rglob("*.py")):
        if _under(_module_name(path, src), CLUSTER):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if _imports_ray(node):
                found.append(f"{path.relative_to(src.parent)}:{getattr(node, 'lineno', 0)}")
    return found


def test_only_cluster_imports_ray() -> None:
    found = ray_imports(SRC)
    assert not found, "Ray is imported in cluster/ only (cluster/ray.py: import_ray):\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "import ray\n",
        "def f():\n    from ray.util import get_node_ip_address\n",
        "import importlib\nRAY = importlib.import_module('ray')\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import ray.exceptions\n",
    ],
)
def test_ray_outside_cluster_is_reported(tmp_path: Path, source: str) -> None:
    src = _tree(tmp_path, {"livegen/runtime/probe.py": source, "livegen/cluster/ray.py": "import ray\n"})
    assert [where.rpartition(":")[0] for where in ray_imports(src)] == [
        f"{tmp_path.name}/livegen/runtime/probe.py"
    ]


def test_ray_in_cluster_and_raylike_names_pass(tmp_path: Path) -> None:
    files = {
        "livegen/cluster/ray.py": "import ray\n",
        "livegen/bench/probe.py": "import rayon\nfrom .ray import x\n",
    }
    assert ray_imports(_tree(tmp_path, files)) == []


# --- function length -------------------------------------------------------------------

MAX_FUNCTION_LINES = 60
#: Functions allowed over the bound (qualified names); none today, and a stale entry fails.
LONG_FUNCTIONS: frozenset[str] = frozenset()


def long_functions(src: Path) -> dict[str, tuple[str, int]]:
    """Functions (methods, nested ones too) longer than the bound: name -> (file:line, lines)."""
    found = {}
    for path in sorted((src / "livegen").rglob("*.py")):
        module = _module_name(path, src)
        if _under(module, NOT_SERVING):
            continue
        found.update(_long_in(ast.parse(path.read_text()), module, path.relative_to(src.parent)))
    return found


def _long_in(node: ast.AST, scope: str, path: Path) -> dict[str, tuple[str, int]]:
    found = {}
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = f"{scope}.{child.name}"
            if not isinstance(child, ast.ClassDef):
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found[name] = (f"{path}:{child.lineno}", lines)
            found.update(_long_in(child, name, path))
        else:
            found.update(_long_in(child, scope, path))
    return found


def test_functions_are_short() -> None:
    found = long_functions(SRC)
    new = {name: where for name, where in found.items() if name not in LONG_FUNCTIONS}
    report = [f"{where}: {name}: {lines} lines" for name, (where, lines) in sorted(new.items())]
    assert not new, f"functions over {MAX_FUNCTION_LINES} lines (split them):\n" + "\n".join(report)


def test_long_functions_list_is_current() -> None:
    stale = sorted(LONG_FUNCTIONS - set(long_functions(SRC)))
    message = "now short or gone: delete from LONG_FUNCTIONS in tests/test_layers.py:\n"
    assert not stale, message + "\n".join(stale)


def test_a_long_function_is_reported(tmp_path: Path) -> None:
    body = "".join(f"        x = {i}\n" for i in range(MAX_FUNCTION_LINES))
    source = f"class A:\n    def f(self) -> None:\n{body}\n    def g(self) -> None:\n        pass\n"
    src = _tree(tmp_path, {"livegen/voice/probe.py": source})
    found = long_functions(src)
    assert list(found) == ["livegen.voice.probe.A.f"]
    where, lines = found["livegen.voice.probe.A.f"]
    assert where.endswith("/livegen/voice/probe.py:2") and lines == MAX_FUNCTION_LINES + 1
