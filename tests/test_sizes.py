"""Size bounds on the serving code, checked on the source tree (issue 38).

No serving file is over ``MAX_FILE_LINES`` lines and no serving class has over
``MAX_CLASS_METHODS`` methods: a module that grows past that holds more than
one concern, and a class that does is a state machine with parts waiting to
be named (the voice session's listener and speaker, its attempts). Serving
code is everything under ``src/livegen`` but the load generators (``bench/``)
and OpenAI's error table (``protocol/errors.py``, one row per code, long by
nature). A method is any function defined in the class's own body: properties
and dunders count, nested classes are classes of their own.

What is over today is allowed, each at its size now, in ``LONG_FILES`` and
``LARGE_CLASSES``: an entry's number is a ceiling (growing past it fails), and
an entry no longer needed fails too, so the lists only shrink.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

MAX_FILE_LINES = 500
MAX_CLASS_METHODS = 25
#: Paths under ``src/livegen`` that are not serving code.
NOT_SERVING = ("bench/", "protocol/errors.py")

#: Serving files over the bound today (path under src/livegen -> lines now): a ceiling each.
LONG_FILES: dict[str, int] = {}
#: Serving classes over the bound today (module.Class -> methods now): a ceiling each.
LARGE_CLASSES: dict[str, int] = {}


def _serving_files(src: Path) -> list[Path]:
    package = src / "livegen"
    return [
        path
        for path in sorted(package.rglob("*.py"))
        if not path.relative_to(package).as_posix().startswith(NOT_SERVING)
    ]


def long_files(src: Path) -> dict[str, int]:
    """Serving files over ``MAX_FILE_LINES``: path under ``livegen/`` -> lines."""
    found = {}
    for path in _serving_files(src):
        lines = len(path.read_text().splitlines())
        if lines > MAX_FILE_LINES:
            found[path.relative_to(src / "livegen").as_posix()] = lines
    return found


def large_classes(src: Path) -> dict[str, int]:
    """Serving classes (nested ones too) with over ``MAX_CLASS_METHODS`` methods: name -> methods."""
    found = {}
    for path in _serving_files(src):
        module = ".".join(path.relative_to(src).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                methods = [f for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)]
                if len(methods) > MAX_CLASS_METHODS:
                    found[f"{module}.{node.name}"] = len(methods)
    return found


def _over_ceiling(found: dict[str, int], allowed: dict[str, int], unit: str) -> list[str]:
    over = []
    for name, size in sorted(found.items()):
        if size > allowed.get(name, 0):
            ceiling = f" (allowed {allowed[name]}: it may only shrink)" if name in allowed else ""
            over.append(f"{name}: {size} {unit}{ceiling}")
    return over


def test_no_serving_file_is_over_the_bound() -> None:
    over = _over_ceiling(long_files(SRC), LONG_FILES, "lines")
    assert not over, f"serving files over {MAX_FILE_LINES} lines: split by concern:\n" + "\n".join(over)


def test_no_serving_class_is_over_the_bound() -> None:
    over = _over_ceiling(large_classes(SRC), LARGE_CLASSES, "methods")
    assert not over, f"serving classes over {MAX_CLASS_METHODS} methods: name its parts:\n" + "\n".join(over)


@pytest.mark.parametrize(
    ("allowed", "check"),
    [(LONG_FILES, long_files), (LARGE_CLASSES, large_classes)],
    ids=["files", "classes"],
)
def test_allowed_sizes_are_still_needed(allowed: dict[str, int], check: object) -> None:
    """An entry whose file or class is within the bound now must go, or the lists only grow."""
    assert callable(check)
    stale = sorted(set(allowed) - set(check(SRC)))
    assert not stale, "within the bound now: delete from tests/test_sizes.py:\n" + "\n".join(stale)


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for relative, source in files.items():
        path = tmp_path / "livegen" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return tmp_path


def _class(name: str, methods: int) -> str:
    body = "".join(f"    def m{i}(self) -> None: ...\n" for i in range(methods))
    return f"class {name}:\n{body}"


def test_a_long_file_is_reported_unless_it_does_not_serve(tmp_path: Path) -> None:
    long = "x = 1\n" * (MAX_FILE_LINES + 1)
    src = _tree(
        tmp_path,
        {
            "voice/long.py": long,
            "voice/short.py": "x = 1\n" * MAX_FILE_LINES,
            "bench/long.py": long,
            "protocol/errors.py": long,
            "protocol/other.py": long,
        },
    )
    assert long_files(src) == {"voice/long.py": MAX_FILE_LINES + 1, "protocol/other.py": MAX_FILE_LINES + 1}


def test_a_large_class_is_reported_nested_ones_too(tmp_path: Path) -> None:
    nested = "class Outer:\n    " + _class("Inner", MAX_CLASS_METHODS + 2).replace("\n", "\n    ")
    src = _tree(
        tmp_path,
        {
            "voice/big.py": _class("Big", MAX_CLASS_METHODS + 1) + _class("Small", MAX_CLASS_METHODS),
            "world/nested.py": nested,
            "bench/big.py": _class("Big", MAX_CLASS_METHODS + 1),
        },
    )
    assert large_classes(src) == {
        "livegen.voice.big.Big": MAX_CLASS_METHODS + 1,
        "livegen.world.nested.Inner": MAX_CLASS_METHODS + 2,
    }


def test_a_ceiling_fails_a_class_that_grows_and_passes_one_that_shrinks() -> None:
    allowed = {"a.B": 30}
    grown = ["a.B: 31 methods (allowed 30: it may only shrink)"]
    assert _over_ceiling({"a.B": 31}, allowed, "methods") == grown
    assert _over_ceiling({"a.B": 29, "c.D": 26}, allowed, "methods") == ["c.D: 26 methods"]
