"""The fuzz bench runs end to end at a toy size: every family answered, no traceback, server up."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from livegen.bench.fuzz import FAMILIES
from livegen.cli import main


def test_fuzz_bench_reports_every_family_and_a_clean_log(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = CliRunner().invoke(main, ["bench", "fuzz", "--seconds", "0.5", "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["server_alive"] is True
    assert report["log"]["tracebacks"] == 0 and report["log"]["error_lines"] == 0
    for family in FAMILIES:
        assert report[family]["sent"] > 0 and report[family]["probes"] > 0, family
        if family != "invalid_utf8":  # those close their socket instead of answering
            assert report[family]["replies"] > 0 and report[family]["sessions_lost"] == 0, family
