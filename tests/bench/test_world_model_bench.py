"""The world-model benchmark runs end to end at a toy size and reports every figure it promises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from livegen.cli import main

pytest.importorskip("torch")


def test_world_model_bench_reports_its_figures(tmp_path: Path) -> None:
    out, strip = tmp_path / "out.json", tmp_path / "strip.png"
    args = ["bench", "world-model", "--chunks", "3", "--follow-frames", "24", "--follow-seeds", "2"]
    args += ["--stability-minutes", "0.1", "--json", str(out), "--strip", str(strip)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["first_chunk_ms"] > 0
    assert set(report["first_frame_over_wire_ms"]) == {"tiny-world", "procedural-world"}
    assert all(ms > 0 for ms in report["first_frame_over_wire_ms"].values())
    assert [s["sessions"] for s in report["speed"]["tiny-world"]] == [1, 4]
    following = report["action_following"]
    assert following["frames"] == 2 * 24 and len(following["per_run_within_2px"]) == 2
    assert 0 <= following["within_2px"] <= 1
    assert report["stability"] and report["checkpoint"]["bytes"] > 0
    assert strip.stat().st_size > 0


def test_causal_wan_bench_reports_cache_speedup_and_real_geometry_bytes(tmp_path: Path) -> None:
    pytest.importorskip("diffusers")
    out = tmp_path / "wan.json"
    args = ["bench", "world-model", "--model", "causal-wan-tiny", "--chunks", "6", "--json", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    for size in ("tiny", "small"):
        figures = report[size]
        assert figures["chunks_timed"] >= 1
        assert all(ms > 0 for ms in figures["dit_ms_per_chunk"].values())
    real = report["real_1_3b_geometry"]
    assert real["kv_page_bytes"] == 30 * 2 * 1560 * 12 * 128 * 2
    assert all(real["allocator_agrees"].values()), real["allocator_agrees"]
    per_session = real["kv_bytes_per_session"] + real["cross_attention_bytes_per_session"]
    per_session += real["vae_decoder_cache_bytes_per_session"]
    assert real["sessions_in_80GiB"] == 80 * 1024**3 // per_session
