"""``livegen bench world-session``: both sides run the same workload; the JSON holds the figures and ratios.

Checks shapes and orientation, never speed (speed is what the benchmark reports).
The baseline's two files come from the vllm-omni wheel on PyPI (cached after the first run).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from livegen.bench.world_session import load_upstream, run_livegen, run_upstream, workload_events
from livegen.cli import main


@pytest.mark.slow
def test_writes_figures_for_both_and_oriented_ratios(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = CliRunner().invoke(
        main, ["bench", "world-session", "--events", "400", "--runs", "2", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())
    ours, theirs = figures["livegen"], figures["vllm_omni"]
    assert figures["events_per_s_ratio"] == pytest.approx(ours["events_per_s"] / theirs["events_per_s"])
    assert figures["tick_overhead_ratio"] == pytest.approx(
        theirs["tick_overhead_us"] / ours["tick_overhead_us"]
    )
    assert figures["workload"]["num_ticks"] == 100 and len(figures["runs"]) == 2
    assert "events accepted / s" in result.output


@pytest.mark.slow
async def test_the_baseline_is_upstreams_session_doing_the_same_work() -> None:
    upstream = load_upstream()
    assert upstream.ARDiffusionSession.__module__ == "vllm_omni.experimental.ar_diffusion.session"
    events = workload_events(40)
    _, our_ticks = run_livegen(events, 4)
    _, their_ticks = await run_upstream(upstream, events, 4)
    assert len(our_ticks) == len(their_ticks) == 10
