"""``livegen bench voice-conversations``: concurrent spoken conversations, end to end at a toy size."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from livegen.bench.voice_conversations import is_correct
from livegen.cli import main


def test_an_answer_is_correct_when_it_says_the_expected_words() -> None:
    assert is_correct("100 plus 25 is 125.", ("125", "twenty five"))
    assert is_correct("Good morning, everyone!", ("good morning",))
    assert not is_correct("Sorry, I can't answer that.", ("125",))
    assert not is_correct("", ("good morning",))


def test_voice_conversations_bench_reports_each_level(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    args = [
        "bench",
        "voice-conversations",
        "--levels",
        "1,2",
        "--turns",
        "1",
        "--stagger",
        "0.5",
        "--asr-batch",
        "1,8",
    ]
    result = CliRunner().invoke(main, [*args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    # One run per recognition set-up, side by side: the old serial path (batch 1), then batches of 8.
    assert [run["asr"]["batch"] for run in report["runs"]] == [1, 8]
    for run in report["runs"]:
        assert [row["conversations"] for row in run["levels"]] == [1, 2]
        for row in run["levels"]:
            assert row["turns"] == row["conversations"]
            assert row["unanswered"] == 0 and row["turn_p50_ms"] > 0
            assert row["correct_share"] > 0  # the embedded cascade answers its arithmetic and repeats
        assert run["max_conversations"] in (0, 1, 2)
