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


def test_noise_is_mixed_at_the_asked_signal_to_noise_ratio() -> None:
    import numpy as np

    from livegen.bench import recognisers

    rng = np.random.default_rng(0)
    speech = (0.3 * np.sin(np.arange(16_000) / 5)).astype(np.float32)
    noise = recognisers.pink_noise(len(speech), rng)
    assert np.sqrt(np.mean(noise**2)) == pytest.approx(1.0, rel=1e-3)
    for snr_db in (10.0, 5.0):
        added = recognisers.mix(speech, noise, snr_db) - speech
        measured = 10 * np.log10(np.mean(speech**2) / np.mean(added**2))
        assert measured == pytest.approx(snr_db, abs=0.1)


@pytest.mark.slow
def test_the_recognisers_table_has_every_recogniser_voice_and_noise_level(
    cascade: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from livegen.bench import recognisers
    from livegen.models.cascade import asr

    monkeypatch.setattr(recognisers, "HELD_OUT", recognisers.HELD_OUT[:1])
    clips = recognisers.build_set(cascade)
    assert len(clips) == len(recognisers.VOICES) * len(recognisers.NOISE_LEVELS)
    results = recognisers.measure(cascade, clips, list(asr.CHOICES))
    assert set(results) == set(asr.CHOICES)
    for result in results.values():
        assert set(result["wer"]) == {label for label, _ in recognisers.VOICES}
        assert all(set(row) == {"clean", "10 dB", "5 dB"} for row in result["wer"].values())
        assert result["rtf_p50"] > 0 and result["wer"]["piper joe (assistant's)"]["clean"] < 0.5
        # One turn per clean clip of each timed voice, each ending in its final transcript.
        assert result["final_ms"]["n"] == len(recognisers.LATENCY_VOICES)
        assert 0 < result["final_ms"]["p50"] <= result["final_ms"]["p95"]
    table = recognisers.render(results)
    assert all(any(line.startswith(f"  {name} ") for line in table[:5]) for name in asr.CHOICES)


def test_each_word_is_timed_to_the_delta_that_brought_it() -> None:
    from livegen.bench import recognisers

    arrivals = [(10.0, "Please"), (10.5, " repeat after"), (11.5, " me.")]
    ends = [9.5, 9.8, 10.2, 10.9]
    assert recognisers._per_word(arrivals, ends) == pytest.approx([500.0, 700.0, 300.0, 600.0])


@pytest.mark.slow
def test_every_voice_is_timed_locally_and_through_another_livegen(cascade: Any) -> None:
    from livegen.bench import voices
    from livegen.models.cascade import voices as names

    results = voices.measure(cascade, rounds=1)
    assert list(results) == list(names.OPENAI_VOICES)
    for voice, row in results.items():
        assert row["speaks_with"] == names.resolve(voice)
        assert row["local_ms"] > 0 and 0 < row["remote_first_ms"] <= row["remote_whole_ms"]
    table = "\n".join(voices.render(results))
    assert all(f"  {voice} " in table for voice in results)
