"""``livegen bench voice-conversations``: concurrent spoken conversations, end to end at a toy size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from livegen.bench.voice_conversations import is_correct
from livegen.cli import main


def test_an_answer_is_correct_when_it_says_the_expected_words() -> None:
    assert is_correct("100 plus 25 is 125.", ("125", "twenty five"))
    assert is_correct("Good morning, everyone!", ("good morning",))
    assert not is_correct("Sorry, I can't answer that.", ("125",))
    assert not is_correct("", ("good morning",))


@pytest.mark.slow  # loads the cascade and serves it
def test_voice_conversations_bench_reports_each_level_per_detector(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    args = ["bench", "voice-conversations", "--levels", "1,2", "--turns", "1", "--stagger", "0.5"]
    setups = ["--asr-batch", "1,8", "--vad", "onnx,ggml"]
    result = CliRunner().invoke(main, [*args, *setups, "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    # Side by side: the old serial path (batch 1), batches of 8, then batches of 8 with the other detector.
    setups_run = [(run["asr"]["batch"], run["vad"]) for run in report["runs"]]
    assert setups_run == [(1, "onnx"), (8, "onnx"), (8, "ggml")]
    for run in report["runs"]:
        assert [row["conversations"] for row in run["levels"]] == [1, 2]
        for row in run["levels"]:
            assert row["turns"] == row["conversations"]
            assert row["unanswered"] == 0 and row["turn_p50_ms"] > 0
            assert row["correct_share"] > 0  # the embedded cascade answers its arithmetic and repeats
        assert run["max_conversations"] in (0, 1, 2)


def test_an_unknown_detector_is_refused_before_anything_loads() -> None:
    result = CliRunner().invoke(main, ["bench", "voice-conversations", "--vad", "onnx,webrtc"])
    assert result.exit_code == 2 and "--vad" in result.output


@pytest.mark.cluster  # starts Ray
@pytest.mark.slow  # loads the cascade in three server processes
def test_voice_conversations_bench_compares_one_process_with_two_side_by_side(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "out.json"
    args = ["bench", "voice-conversations", "--workers", "1", "--workers", "2", "--levels", "2"]
    result = CliRunner().invoke(main, [*args, "--turns", "1", "--stagger", "0.5", "--json", str(out)])
    assert result.exit_code == 0, result.output
    one, two = json.loads(out.read_text())["runs"]
    assert (one["workers"], two["workers"]) == (1, 2)
    assert len(one["server_rss_mib"]) == 1 and len(two["server_rss_mib"]) == 2
    for run in (one, two):
        [row] = run["levels"]
        assert (row["conversations"], row["turns"], row["unanswered"]) == (2, 2, 0)
        assert row["correct_share"] > 0 and row["server_cpu_cores"] > 0
        assert run["max_conversations"] in (0, 2)
    assert two["memory_per_extra_process_mib"] > 0 and two["supervisor_and_ray_rss_mib"] > 0
