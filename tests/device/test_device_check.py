"""The device check's own Python (scripts/device/): the report from partial results, the clients'
summary and the server's figures read from /health, the batch sizes that fit a GPU.

The check itself (check.sh, DEVICE_DRY=1) is too slow for the suite: CI runs it in a bare
environment (.ci/run). These are the parts a lent machine's only run depends on being right.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "device"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"device_{name}", SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


report = _load("report")
clients = _load("clients")
stages = _load("stages")


def _duplex() -> dict[str, Any]:
    row = {"sessions": 8, "step_ms_p50": 40.0, "step_ms_p95": 50.0, "step_ms_p99": 70.0, "step_ms_max": 90.0,
           "frames_over_period": 1, "gpu_memory_gib": 31.5, "held": True}  # fmt: skip
    return {"model": "moshi (7B geometry, random weights)", "device": "cuda:0", "dtype": "bfloat16",
            "frame_ms": 80.0, "steps": 50, "sessions_held": 8, "first_audio": {"first_audio_ms": 171.0},
            "sizes": [row]}  # fmt: skip


def _stage(work: Path, name: str, rc: int, timed_out: bool = False) -> None:
    line = {"stage": name, "rc": rc, "seconds": 3, "budget_s": 100, "timed_out": timed_out}
    with (work / "stages.jsonl").open("a") as handle:
        handle.write(json.dumps(line) + "\n")


def test_a_timed_out_stage_is_reported_with_its_log_and_the_others_figures_are_still_written(
    tmp_path: Path,
) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    (work / "duplex.json").write_text(json.dumps(_duplex()))
    _stage(work, "duplex", 0)
    _stage(work, "wan", 124, timed_out=True)
    (work / "wan.log").write_text("building\nstill building\n")
    status = report.main([str(work), str(out), "--wall-s", "480"])
    assert status == 1  # CI's dry run fails on any failed stage
    written = json.loads((out / "device.json").read_text())
    assert written["figures"]["duplex"]["sessions_held"] == 8
    assert written["failed"] == ["wan"]  # the stages left out (DEVICE_STAGES) are not failures
    table = (out / "device.md").read_text()
    assert "| 8 | 40.0 | 50.0 | 70.0 | 90.0 | 1/50 | 31.5 | yes |" in table
    assert "| wan | timed out | 3 | 100 |" in table and "| serve | not run | - | - |" in table
    assert "still building" in table and "Wall time: 480 s." in table


def test_a_run_where_no_stage_ran_fails(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    assert report.main([str(tmp_path / "work"), str(tmp_path / "out")]) == 1


def test_a_complete_run_exits_zero_and_tabulates_every_stage(tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    figures = {
        "machine": {"python": "3.12.3", "cpus": 16, "torch": "2.11.0", "cuda": "13.0",
                    "transformers": "5.17.0", "gpu": {"name": "NVIDIA H200", "memory_gib": 139.8}},
        "duplex": _duplex(),
        "wan": {"geometry": "1.3b", "device": "cuda:0", "dtype": "bfloat16", "first_chunk_ms": 420.0,
                "frames_per_chunk": 12, "fps": 16.0,
                "sessions": [{"sessions": 4, "fps_per_session": 17.5, "ms_per_frame": 57.1}]},
        "checkpoint": {"geometry": "7b", "dtype": "bfloat16", "bytes": 15 * 1024**3, "save_s": 20.0},
        "serve": {"sessions": 8, "seconds": 60.0, "sessions_with_audio": 8, "first_audio_ms_p50": 180.0,
                  "first_audio_ms_max": 260.0, "audio_s_per_session_min": 58.2, "missed_frames": 0,
                  "step_ms": 41.0, "server_cpu_share": 0.42, "errors": []},
    }  # fmt: skip
    for name, value in figures.items():
        (work / f"{name}.json").write_text(json.dumps(value))
        _stage(work, name, 0)
    assert report.main([str(work), str(out)]) == 0
    table = (out / "device.md").read_text()
    assert "NVIDIA H200 (139.8 GiB)" in table and "| 4 | 17.5 | 57.1 |" in table
    assert "| 8 | 8 | 180.0 | 260.0 | 58.2 | 0 | 41.0 | 42% of a core | none |" in table
    assert "15.00 GiB bfloat16" in table and "last lines" not in table


def test_the_clients_summary_counts_sessions_that_never_heard_audio() -> None:
    seen = [{"first_audio_ms": 200.0, "audio_s": 59.0, "errors": []},
            {"first_audio_ms": None, "audio_s": 0.0, "errors": ["realtime_capacity"]},
            {"first_audio_ms": 100.0, "audio_s": 58.0, "errors": []}]  # fmt: skip
    summary = clients.summary(seen, 60.0)
    assert summary["sessions"] == 3 and summary["sessions_with_audio"] == 2
    assert summary["first_audio_ms_p50"] == 150.0 and summary["first_audio_ms_max"] == 200.0
    assert summary["audio_s_per_session_min"] == 0.0 and summary["errors"] == ["realtime_capacity"]


def test_the_clock_figures_are_found_wherever_health_nests_them() -> None:
    health = {"status": "ok", "voice": {"model": "moshi", "detail": {"duplex_missed_frames": 3}}}
    assert clients.duplex_detail(health) == {"duplex_missed_frames": 3}
    assert clients.duplex_detail({"voice": {"detail": {}}}) == {}


@pytest.mark.parametrize(
    ("memory_gib", "fit"),
    [(139.8, [1, 8, 16, 32, 48, 64]), (79.2, [1, 8, 16, 32]), (20.0, [1]), (None, [1, 8, 16, 32, 48, 64])],
)
def test_only_the_batch_sizes_whose_state_fits_the_gpu_are_measured(
    memory_gib: float | None, fit: list[int]
) -> None:
    assert stages.sizes_that_fit([1, 8, 16, 32, 48, 64], memory_gib) == fit
