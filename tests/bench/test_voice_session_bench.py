"""The voice-session benchmark runs end to end at a toy size and reports every figure it promises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from livegen.cli import main


@pytest.mark.parametrize("aligned", [False, True])
def test_voice_session_bench_reports_its_figures(tmp_path: Path, aligned: bool) -> None:
    out = tmp_path / "out.json"
    args = [
        "bench",
        "voice-session",
        "--levels",
        "1,3",
        "--seconds",
        "1",
        "--idle-sessions",
        "3",
        "--runs",
        "2",
        "--json",
        str(out),
        *(["--aligned"] if aligned else []),
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["phases"] == ("aligned" if aligned else "spread")
    assert [level["sessions"] for level in report["levels"]] == [1, 3]
    for level in report["levels"]:
        assert level["appends"] == level["sessions"] * (50 - 10)  # 1 s of 20 ms appends, less the warm-up
        assert level["append_to_model_ms"]["p50"] > 0
        assert level["events_per_second_per_core"] > 0
        assert len(level["p99_of_each_run"]) == 2
        assert level["append_to_model_ms"]["p99"] in level["p99_of_each_run"]
    assert report["sessions_per_core"] in (0, 1, 3)
    assert report["memory_per_idle_session_kib"] >= 0


@pytest.mark.parametrize("neighbour_on", ["server", "clients"])
def test_voice_session_bench_measures_each_level_again_beside_a_busy_neighbour(
    tmp_path: Path, neighbour_on: str
) -> None:
    out = tmp_path / "out.json"
    args = ["bench", "voice-session", "--levels", "1,2", "--seconds", "1", "--idle-sessions", "2"]
    args += ["--runs", "1", "--neighbour", "0.5", "--neighbour-on", neighbour_on, "--json", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["neighbour_share"] == 0.5
    on = [report["server_cpu"]] if neighbour_on == "server" else report["client_cpus"]
    assert report["neighbour_cpu"] in on
    assert [level["sessions"] for level in report["levels_with_neighbour"]] == [1, 2]
    assert all(level["append_to_model_ms"]["p50"] > 0 for level in report["levels_with_neighbour"])
    assert report["sessions_per_core_with_neighbour"] in (0, 1, 2)
    assert "sessions_per_core" in report


@pytest.mark.cluster  # starts Ray
def test_voice_session_bench_compares_one_process_with_two_side_by_side(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "out.json"
    args = ["bench", "voice-session", "--workers", "1", "--workers", "2", "--levels", "1,4"]
    args += ["--seconds", "1", "--idle-sessions", "2", "--runs", "1", "--busy-neighbour", "--json", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    one, two = json.loads(out.read_text())["runs"]
    assert (one["workers"], two["workers"]) == (1, 2)
    assert len(one["server_rss_mib"]) == 1 and len(two["server_rss_mib"]) == 2
    for run in (one, two):
        assert [level["sessions"] for level in run["levels"]] == [1, 4]
        assert [level["sessions"] for level in run["levels_with_busy_neighbour"]] == [1, 4]
        assert all(level["appends"] == level["sessions"] * (50 - 10) for level in run["levels"])
    assert two["memory_per_extra_process_mib"] > 0 and two["supervisor_and_ray_rss_mib"] > 0
