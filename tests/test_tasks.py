"""Every task in ``src/livegen`` has an owner: no bare ``asyncio.create_task`` or ``ensure_future``.

``asyncio`` keeps only a weak reference to a task, so one nobody holds may be
collected mid-flight, and one nobody cancels outlives whatever started it. The
rule, checkable by a walk of the source: a task is spawned only through an
owner that cancels and awaits it, either an ``asyncio.TaskGroup`` (its
``create_task``) or a ``TaskSet`` (``livegen/tasks.py``, its ``spawn``), the one
module allowed to call ``asyncio.create_task`` itself. So the walk refuses:

- ``asyncio.create_task(...)``, ``asyncio.ensure_future(...)``, ``asyncio.Task(...)``;
- ``.ensure_future(...)`` on anything;
- ``.create_task(...)`` on an event loop: ``get_running_loop()``/``get_event_loop()``
  called in place, or a name ending in ``loop`` (``loop``, ``self._loop``).

``.create_task`` on anything else is taken for a ``TaskGroup``'s. The load
generators (``bench/``) and the client library (``client/``) are not checked.
``ALLOWED`` lists the modules other work is converting now (none left); an entry that no
longer matches a spawn fails the test, so the list only shrinks.
"""

from __future__ import annotations

import ast
from fnmatch import fnmatch
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "livegen"
#: Not checked: what does not serve.
SKIPPED = ("bench/", "client/")
#: The one module that spawns with ``asyncio.create_task``: the owner of the tasks it makes.
HELPER = "tasks.py"
#: Modules being converted to owned spawns now (issue 24); emptied as they land.
ALLOWED: tuple[str, ...] = ()
_LOOP_GETTERS = {"get_running_loop", "get_event_loop"}


def _is_loop(node: ast.expr) -> bool:
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        return name in _LOOP_GETTERS
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name.endswith("loop")


def _is_bare_spawn(node: ast.Call) -> bool:
    func = node.func
    if not isinstance(func, ast.Attribute):
        return False
    receiver = func.value
    is_asyncio = isinstance(receiver, ast.Name) and receiver.id == "asyncio"
    if func.attr in ("create_task", "Task"):
        return is_asyncio or (func.attr == "create_task" and _is_loop(receiver))
    return func.attr == "ensure_future"


def bare_spawns(path: Path) -> list[int]:
    """The lines of ``path`` that spawn a task no owner holds."""
    tree = ast.parse(path.read_text(), str(path))
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call) and _is_bare_spawn(node)]


def _checked() -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for path in sorted(SRC.rglob("*.py")):
        name = path.relative_to(SRC).as_posix()
        if name.startswith(SKIPPED) or name == HELPER:
            continue
        if lines := bare_spawns(path):
            found[name] = lines
    return found


def test_the_walk_finds_each_kind_of_bare_spawn(tmp_path: Path) -> None:
    source = tmp_path / "example.py"
    source.write_text(
        "import asyncio\n"
        "async def f(coro, tg, tasks, self):\n"
        "    asyncio.create_task(coro)\n"  # 3
        "    asyncio.ensure_future(coro)\n"  # 4
        "    asyncio.get_running_loop().create_task(coro)\n"  # 5
        "    loop = asyncio.get_running_loop()\n"
        "    loop.create_task(coro)\n"  # 7
        "    self._loop.create_task(coro)\n"  # 8
        "    asyncio.Task(coro)\n"  # 9
        "    tg.create_task(coro)\n"  # owned by a TaskGroup
        "    tasks.spawn(coro)\n"  # owned by a TaskSet
        "    self._tasks.create_task(coro)\n"  # a TaskGroup held by its owner
    )
    assert bare_spawns(source) == [3, 4, 5, 7, 8, 9]


def test_every_task_in_the_source_has_an_owner() -> None:
    found = _checked()
    unowned = {name: lines for name, lines in found.items() if not any(fnmatch(name, p) for p in ALLOWED)}
    assert not unowned, (
        "spawn tasks through an owner that cancels and awaits them: an asyncio.TaskGroup's "
        f"create_task or a livegen.tasks.TaskSet's spawn, not {unowned}"
    )


def test_the_allow_list_only_shrinks() -> None:
    found = _checked()
    stale = [pattern for pattern in ALLOWED if not any(fnmatch(name, pattern) for name in found)]
    assert not stale, (
        f"these no longer spawn bare tasks: take them off ALLOWED in tests/test_tasks.py: {stale}"
    )
