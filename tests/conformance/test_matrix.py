"""The generator of docs/compatibility.md, on a small results file: cells, worst outcome, notes."""

from __future__ import annotations

import json
from pathlib import Path

from conformance import matrix

RESULTS = {
    "date": "2026-12-01 03:00 UTC",
    "command": "pytest tests/conformance",
    "results": [
        {"client": "a 1.0", "capability": "text-turn", "test": "t::a_text", "outcome": "pass", "reason": ""},
        {
            "client": "a 1.0",
            "capability": "barge-in",
            "test": "t::a_barge",
            "outcome": "fail",
            "reason": "boom",
        },
        {
            "client": "a 1.0",
            "capability": "unknown-item",
            "test": "t::a_get",
            "outcome": "pass",
            "reason": "",
        },
        {
            "client": "a 1.0",
            "capability": "unknown-item",
            "test": "t::a_del",
            "outcome": "n/a",
            "reason": "no API",
        },
        {"client": "b 2.0", "capability": "barge-in", "test": "t::b_barge", "outcome": "pass", "reason": ""},
        {"client": "b 2.0", "capability": "tls", "test": "t::b_tls", "outcome": "skip", "reason": "no node"},
        {"client": "b 2.0", "capability": "text-turn", "test": "t::b_t1", "outcome": "pass", "reason": ""},
        {"client": "b 2.0", "capability": "text-turn", "test": "t::b_t2", "outcome": "fail", "reason": "bad"},
    ],
}


def test_the_matrix_has_a_row_per_client_and_the_worst_outcome_per_cell(tmp_path: Path) -> None:
    source = tmp_path / "conformance.json"
    source.write_text(json.dumps(RESULTS))
    out = tmp_path / "compatibility.md"
    matrix.main(["--json", str(source), "--out", str(out)])
    text = out.read_text()
    rows = [line for line in text.splitlines() if line.startswith("|")]
    # Columns in the canonical order, only those tested.
    assert rows[0] == "| client | barge-in | text-turn | unknown-item | tls |"
    assert rows[2] == "| a 1.0 | **FAIL** [1] | pass | pass [2] | not tested |"
    assert rows[3] == "| b 2.0 | pass | **FAIL** [3] | not tested | skipped [4] |"
    assert "1. a 1.0, barge-in: boom (t::a_barge)" in text
    assert "2. a 1.0, unknown-item: no API" in text
    assert "3. b 2.0, text-turn: bad (t::b_t2)" in text
    assert "4. b 2.0, tls: no node" in text
    assert "2026-12-01 03:00 UTC, `pytest tests/conformance`" in text
    assert "cells passing: 3 of 6" in text


def test_a_cell_of_only_na_reads_na() -> None:
    only = {**RESULTS, "results": [RESULTS["results"][3]]}
    assert "| a 1.0 | n/a [1] |" in matrix.render(only)


def test_the_recorder_writes_each_marked_test_and_its_outcome(tmp_path: Path) -> None:
    """A real pytest run of one marked test (no server needed) lands in the JSON the matrix reads."""
    import os
    import subprocess
    import sys

    out = tmp_path / "conformance.json"
    test = "tests/conformance/test_pipecat.py::test_unknown_item_delete_has_no_api"
    root = Path(__file__).parents[2]
    env = {**os.environ, "LIVEGEN_CONFORMANCE_JSON": str(out)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test]
    done = subprocess.run(
        command, cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout[-2000:]
    data = json.loads(out.read_text())
    assert data["command"].endswith(test) and data["date"].endswith("UTC")
    [result] = data["results"]
    assert result["client"] == "pipecat 1.14.0" and result["capability"] == "unknown-item"
    assert result["outcome"] == "n/a" and result["reason"].startswith("delete: pipecat has no API")
