"""``livegen bench voice-model``: its word error rate, and one spoken turn through each transport."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from livegen.bench import voice_model, voice_turns


@pytest.fixture(scope="module")
def cascade() -> Iterator[Any]:
    from livegen.models.cascade import model

    loaded = model.load()
    yield loaded
    loaded.close()


def test_word_error_rate_counts_edits_after_normalising_numbers_and_punctuation() -> None:
    assert voice_model.word_errors("What is twelve times seven?", "What is 12 times 7?") == (0, 5)
    assert voice_model.word_errors("What is eighty one?", "what is 81") == (0, 3)
    assert voice_model.word_errors("one hundred plus twenty five", "100 plus 25") == (0, 3)
    assert voice_model.word_errors("Tell me a joke.", "Tell the joke.") == (2, 4)
    assert voice_model.word_errors("good morning", "") == (2, 2)
    assert voice_model.wer([("a b c d", "a b x d"), ("e f", "e f g")]) == pytest.approx(2 / 6)


def test_percentiles() -> None:
    summary = voice_model.percentiles([float(v) for v in range(1, 101)])
    assert (summary["n"], summary["p50"], summary["p95"], summary["max"]) == (100, 50.5, 95.0, 100.0)
    assert voice_model.percentiles([]) == {"n": 0}


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["server", "contract"])
async def test_one_spoken_turn_is_timed(cascade: Any, transport: str) -> None:
    turns: voice_turns.Turns
    turns = voice_turns.ServerTurns(500) if transport == "server" else voice_turns.ContractTurns(cascade, 500)
    try:
        result = await turns.turn(voice_turns.synthesise(cascade, "What is twelve times seven?"))
    finally:
        turns.close()
    assert "12" in result.transcript
    assert result.answer == "12 times 7 is 84."
    assert result.speech_stopped_ms is not None and result.speech_stopped_ms >= 500  # the silence window
    assert result.first_audio_ms is not None and result.first_audio_ms > 0
