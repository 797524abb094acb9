"""The voice wire's error table is the only source of codes and messages, and the docs show it.

The cores (protocol/, voice/, the voice runner) may not write a code, nor build a
protocol error, anywhere but in ``protocol/errors.py``: every error they send is
a row of the table by construction. The server modules that refuse connections
must use codes the table lists. docs/voice-protocol.md holds the table exactly
as ``markdown_table()`` renders it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from livegen.errors import RemoteProtocolError
from livegen.protocol import errors as table

SRC = Path(__file__).resolve().parents[2] / "src" / "livegen"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "voice-protocol.md"
#: Modules on the voice wire that must build every error from the table.
CORE = sorted(
    [
        *(SRC / "protocol").rglob("*.py"),
        *(SRC / "voice").glob("*.py"),
        SRC / "runtime" / "voice" / "runner.py",
    ]
)
CORE = [p for p in CORE if p.name not in ("errors.py", "world.py")]  # the table itself; worlds differ
#: Modules that refuse voice connections: every code they write must be the table's.
EDGE = [
    *(SRC / "server" / "realtime").glob("*.py"),
    *(SRC / "server" / "http").glob("*.py"),
    SRC / "runtime" / "voice" / "engine.py",
    SRC / "runtime" / "voice" / "lifecycle.py",
]
ERROR_CLASSES = {"InvalidRequest", "InvalidState", "CapacityExceeded", "Unauthorized"}


def literal_codes(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, code) of every ``code="..."`` keyword and ``{"code": "..."}`` entry."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "code":
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                found.append((node.value.lineno, node.value.value))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                is_text = isinstance(value, ast.Constant) and isinstance(value.value, str)
                if isinstance(key, ast.Constant) and key.value == "code" and is_text:  # not a close code
                    found.append((value.lineno, str(value.value)))
    return found


def error_constructions(tree: ast.AST) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ERROR_CLASSES
    ]


@pytest.mark.parametrize("path", CORE, ids=lambda p: str(p.relative_to(SRC)))
def test_the_voice_core_writes_no_code_of_its_own(path: Path) -> None:
    tree = ast.parse(path.read_text())
    assert literal_codes(tree) == [], f"{path.name}: use a row of livegen.protocol.errors"
    assert error_constructions(tree) == [], f"{path.name}: build errors with a row's .error()"


@pytest.mark.parametrize("path", EDGE, ids=lambda p: str(p.relative_to(SRC)))
def test_the_voice_server_sends_only_codes_of_the_table(path: Path) -> None:
    codes = literal_codes(ast.parse(path.read_text()))
    assert [(line, code) for line, code in codes if code not in table.CODES] == []


def test_the_core_scan_sees_the_modules_that_raise() -> None:
    # Guard against a scan that checks nothing: the modules that raise most are in it.
    names = {str(p.relative_to(SRC)) for p in CORE}
    assert {"voice/session.py", "voice/conversation.py", "protocol/realtime/client.py"} <= names
    assert sorted(literal_codes(ast.parse('f(code="x")\nd = {"code": "y"}'))) == [(1, "x"), (2, "y")]


@pytest.mark.parametrize("row", table.TABLE, ids=lambda r: r.code)
def test_each_row_is_consistent(row: table.WireError) -> None:
    assert row.origin in ("openai", "openai code", "livegen")
    assert row.when and row.message
    if row.kind is not None:
        assert issubclass(row.kind, RemoteProtocolError)
        assert row.kind.error_type == row.error_type, "the exception's error.type must be the row's"


def test_openai_defined_errors_carry_openai_words() -> None:
    error = table.ITEM_RETRIEVE_INVALID_ITEM_ID.error(item_id="nope", event_id="e1")
    assert error.to_error_body() == {
        "type": "invalid_request_error",
        "code": "item_retrieve_invalid_item_id",
        "message": "Error retrieving item: the item with id 'nope' does not exist.",
        "param": None,
        "event_id": "e1",
    }
    assert table.RESPONSE_CANCEL_NOT_ACTIVE.error().message == "Cancellation failed: no active response found"
    commit = table.INPUT_AUDIO_BUFFER_COMMIT_EMPTY.error(min_ms=1, buffered_ms=0.0).message
    assert commit.startswith("Error committing input audio buffer: buffer too small.")


def test_the_docs_show_the_table() -> None:
    text = DOCS.read_text()
    begin, end = "<!-- error-table:begin -->\n", "\n<!-- error-table:end -->"
    assert begin in text and end in text
    shown = text.split(begin, 1)[1].split(end, 1)[0]
    assert shown == table.markdown_table(), (
        "docs/voice-protocol.md is out of date: paste the output of "
        "python -c 'from livegen.protocol.errors import markdown_table; print(markdown_table())'"
    )
