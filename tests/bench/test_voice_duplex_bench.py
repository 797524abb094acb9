"""The lockstep duplex bench runs end to end on moshi-tiny and reports every figure it promises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from livegen.cli import main

pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_voice_duplex_bench_reports_step_times_sessions_held_and_first_audio(tmp_path: Path) -> None:
    out, table = tmp_path / "duplex.json", tmp_path / "duplex.md"
    args = ["bench", "voice-lockstep", "--sizes", "1,3", "--steps", "3", "--warmup", "1"]
    result = CliRunner().invoke(main, [*args, "--json", str(out), "--markdown", str(table)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["frame_ms"] == 80.0 and report["device"] == "cpu"
    assert [row["sessions"] for row in report["sizes"]] == [1, 3]
    for row in report["sizes"]:
        assert 0 < row["step_ms_p50"] <= row["step_ms_p95"] <= row["step_ms_p99"] <= row["step_ms_max"]
        assert row["gpu_memory_gib"] is None  # on the CPU
        assert row["held"] == (row["step_ms_p95"] < 80.0)
        assert 0 <= row["frames_over_period"] <= 3 and row["cpu_ms_p50"] >= 0
    held = [row["sessions"] for row in report["sizes"] if row["held"]]
    assert report["sessions_held"] == max(held, default=0)
    first = report["first_audio"]
    assert first["first_audio_ms"] >= 160.0 + first["first_audio_step_ms"]
    assert report["state_bytes_per_session"] > 0
    assert "| 3 |" in table.read_text()


def test_voice_duplex_bench_refuses_an_empty_size_list() -> None:
    result = CliRunner().invoke(main, ["bench", "voice-lockstep", "--sizes", ","])
    assert result.exit_code != 0
    assert "--sizes" in result.output
