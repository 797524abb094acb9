"""Every test that starts Ray carries the ``cluster`` marker, so the fast tier leaves it out.

The fast tier (docs/development.md) is ``pytest -m "not slow and not cluster and
not browser"``: a Ray test without the marker would start a Ray cluster there,
seconds each. A test starts Ray when its module imports Ray or the cluster
harness, asks for Ray with ``importorskip``, or runs ``--workers`` or
``--world-workers`` above 0; the walk below finds those signs in each test
module's source, at module level (the whole module is a cluster module) or in
one test (that test is).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent

#: What starts Ray, in a test's source.
RAY_SIGNS = re.compile(
    r"importorskip\(\"ray\"\)|^\s*import ray\b|\bcluster_harness\b|\bstart_serve\("
    r"|\"--workers\"|\"--world-workers\", \"[1-9]\"|\bworld_workers=[1-9]",
    re.MULTILINE,
)


def _marks_cluster(decorators: list[ast.expr]) -> bool:
    return any("mark.cluster" in ast.unparse(decorator) for decorator in decorators)


def _module_marked(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            return "mark.cluster" in ast.unparse(node.value)
    return False


def unmarked_ray_tests(path: Path) -> list[str]:
    """The tests of ``path`` that start Ray without the marker (the module's name: all of them)."""
    source = path.read_text()
    tree = ast.parse(source)
    if _module_marked(tree):
        return []
    tests = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    top = "\n".join(ast.get_source_segment(source, n) or "" for n in tree.body if n not in tests)
    if RAY_SIGNS.search(top):
        return [path.name]
    return [
        f"{path.name}::{test.name}"
        for test in tests
        if test.name.startswith("test_")
        and RAY_SIGNS.search(ast.get_source_segment(source, test) or "")
        and not _marks_cluster(test.decorator_list)
    ]


def test_every_test_that_starts_ray_is_marked_cluster() -> None:
    modules = [path for path in sorted(TESTS.rglob("test_*.py")) if path.name != Path(__file__).name]
    found = [name for path in modules for name in unmarked_ray_tests(path)]
    assert found == []


def test_the_walk_finds_an_unmarked_ray_test(tmp_path: Path) -> None:
    module = tmp_path / "test_example.py"
    module.write_text(
        "import pytest\n\n\n"
        "def test_in_process() -> None:\n    pass\n\n\n"
        'def test_two_processes() -> None:\n    pytest.importorskip("ray")\n\n\n'
        "@pytest.mark.cluster\n"
        'def test_marked() -> None:\n    run(["--workers", "2"])\n'
    )
    assert unmarked_ray_tests(module) == ["test_example.py::test_two_processes"]
    module.write_text('import pytest\n\npytest.importorskip("ray")\n\n\ndef test_a() -> None:\n    pass\n')
    assert unmarked_ray_tests(module) == ["test_example.py"]
    module.write_text('import pytest\n\npytestmark = pytest.mark.cluster\npytest.importorskip("ray")\n')
    assert unmarked_ray_tests(module) == []
