"""The shape of the outer rooms (issue 38), checked on the source tree: ``server/`` by concern, with
at most ``MAX_TOP`` modules at its top and at most ``MAX_FOLDER`` in any of its folders, so that a
newcomer finds the app, the HTTP edge, the WebSockets, WebRTC, worlds and the audio API each in one
place; and no import circle anywhere outside ``bench/``."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SERVER = Path(__file__).resolve().parents[1] / "src" / "livegen" / "server"
MAX_TOP = 10
MAX_FOLDER = 8


def modules(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.py") if p.name != "__init__.py")


def test_server_has_few_modules_at_its_top() -> None:
    top = modules(SERVER)
    assert len(top) <= MAX_TOP, f"server/ has {len(top)} top-level modules (at most {MAX_TOP}): {top}"


def test_no_server_folder_is_crowded() -> None:
    folders = [p for p in SERVER.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    assert folders, "server/ is split by concern into packages"
    crowded = {f.name: modules(f) for f in folders if len(modules(f)) > MAX_FOLDER}
    assert not crowded, f"server/ folders over {MAX_FOLDER} modules: {crowded}"


def test_every_server_folder_says_what_it_owns() -> None:
    for folder in (p for p in SERVER.iterdir() if (p / "__init__.py").exists()):
        assert (folder / "__init__.py").read_text().startswith('"""'), f"{folder.name}/ has no docstring"


# --- no import circles (issue 38) ------------------------------------------------------------

SRC = SERVER.parents[1]


def _modules() -> dict[str, Path]:
    found = {}
    for path in (SRC / "livegen").rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Every import of each module, TYPE_CHECKING and function-level ones too; ``from pkg import
    sub`` names the submodule, not the package."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                subs = [f"{node.module}.{alias.name}" for alias in node.names]
                targets = [t for t in subs if t in modules]
                if len(targets) < len(subs):
                    targets.append(node.module)
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_outside_bench() -> None:
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 5000))
    found = [c for c in circles(import_graph(_modules())) if not all(".bench" in m for m in c)]
    assert not found, "import circles (a child declares the narrow Protocol it needs):\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def test_a_circle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
