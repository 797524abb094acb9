"""The world-stream benchmark plays real page-like sessions against a served model and reports its figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
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
    [run] = report["runs"]  # no --frames-per-chunk: one server, the model's own chunks
    assert run["frames_per_chunk"] == 4
    assert run["bench_ms_per_frame"] > 0 and run["served"]["ms_per_frame"] > 0
    assert run["served"]["chunks"] >= 2
    rows = [(row["sessions"], row["ack_at"], row["frames_per_chunk"]) for row in report["realtime"]]
    assert rows == [(1, "start", 4), (2, "start", 4)]
    for row in report["realtime"]:
        assert row["fps_median"] > 0, row  # frames were played, at the model's pace
        assert row["errors"] == []


@pytest.mark.cluster  # starts Ray
def test_world_stream_bench_serves_each_number_of_workers_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    args = ["bench", "world-stream", "--model", "procedural-world", "--levels", "1", "--seconds", "3"]
    args += ["--ack-at", "start", "--world-workers", "0", "--world-workers", "1"]
    args += ["--warm-up", "1", "--served-seconds", "2", "--model-chunks", "3", "--json", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert [run["world_workers"] for run in report["runs"]] == [0, 1]
    assert all(run["served"]["chunks"] >= 2 for run in report["runs"])
    assert [row["world_workers"] for row in report["realtime"]] == [0, 1]
    for row in report["realtime"]:
        assert row["fps_median"] > 0 and row["errors"] == [], row
    assert "1 Ray worker," in result.output and "in process" in result.output
