"""The world-stream benchmark plays real page-like sessions against a served model and reports its figures."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from livegen.cli import main


def test_world_stream_bench_reports_model_and_served_figures(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    args = ["bench", "world-stream", "--model", "procedural-world", "--levels", "1,2", "--seconds", "3"]
    args += ["--ack-at", "start"]
    args += ["--warm-up", "1", "--served-seconds", "2", "--model-chunks", "3", "--json", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["bench_ms_per_frame"] > 0 and report["served"]["ms_per_frame"] > 0
    assert report["served"]["chunks"] >= 2
    assert [(row["sessions"], row["ack_at"]) for row in report["realtime"]] == [(1, "start"), (2, "start")]
    for row in report["realtime"]:
        assert row["fps_median"] > 0, row  # frames were played, at the model's pace
        assert row["errors"] == []
