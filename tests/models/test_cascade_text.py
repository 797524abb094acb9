"""The cascade's pure parts: the built-in responder, spoken arithmetic, sentence pieces."""

from __future__ import annotations

from datetime import datetime

import pytest

from livegen.models.cascade import arithmetic, responder, sentences

NOW = datetime(2026, 11, 29, 17, 42)


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        ("What is 12 times 7?", "12 times 7 is 84."),
        ("what is twelve times seven", "12 times 7 is 84."),
        ("What's 3 + 4?", "3 plus 4 is 7."),
        ("What is one hundred and twenty three plus 7?", "123 plus 7 is 130."),
        ("What is the square root of 16?", "The square root of 16 is 4."),
        ("What is 2 to the power of 10?", "2 to the power of 10 is 1024."),
        ("20 percent of 50", "20 percent of 50 is 10."),
        ("What is 7 divided by 2?", "7 divided by 2 is 3.5."),
        ("What is 2 plus 3 times 4?", "2 plus 3 times 4 is 14."),
        ("What is 10 divided by 0?", "You can't divide by zero."),
        ("What is 9 to the power of 999?", "That number is too big for me."),
    ],
)
def test_arithmetic_reads_digits_and_words(said: str, expected: str) -> None:
    assert arithmetic.answer(said.lower()) == expected


@pytest.mark.parametrize(
    "said", ["what is x", "what time is it", "hello there", "what is 3 plus", "plus plus"]
)
def test_arithmetic_declines_what_is_not_a_sum(said: str) -> None:
    assert arithmetic.answer(said) is None


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        ("What time is it?", "It's 5:42 PM."),
        ("What's the date today?", "Today is Sunday, November 29, 2026."),
        ("What day is it?", "Today is Sunday, November 29, 2026."),
        ("Repeat after me, the cat sat on the mat.", "The cat sat on the mat."),
        ("Repeat after me.", "Sure. What should I repeat?"),
        ("Hello there.", "Hello! How can I help you?"),
        ("What can you do?", responder.HELP),
        ("What's the weather like tomorrow?", "I can't check the weather: I have no internet connection."),
        ("Tell me about quantum physics.", responder.FALLBACK),
        ("", responder.NOT_HEARD),
        ("What is 12 times 7?", "12 times 7 is 84."),
    ],
)
def test_responder_answers_what_it_can_and_says_what_it_cannot(said: str, expected: str) -> None:
    assert responder.reply(said, NOW) == expected


def test_time_in_the_morning_and_at_midnight() -> None:
    assert responder.reply("what time is it", datetime(2026, 1, 1, 0, 5)) == "It's 12:05 AM."
    assert responder.reply("what's the time", datetime(2026, 1, 1, 9, 30)) == "It's 9:30 AM."


def test_repeat_wins_over_the_other_rules() -> None:
    assert responder.reply("Say what time is it", NOW) == "What time is it."


def test_sentences_cut_at_ends_but_not_inside_numbers() -> None:
    text = "It is 3.5 degrees. Well, I think so! Really? Yes."
    assert sentences.split(text) == ["It is 3.5 degrees.", "Well, I think so!", "Really?", "Yes."]


def test_first_piece_is_cut_early_at_a_clause() -> None:
    text = "I can tell you the time and the date, and do sums. For more, ask."
    assert sentences.split(text) == [
        "I can tell you the time and the date,",
        "and do sums.",
        "For more, ask.",
    ]


def test_short_opening_clause_is_not_a_piece() -> None:
    assert sentences.split("Well, that is it.") == ["Well, that is it."]


def test_streamed_text_gives_the_same_pieces_as_whole_text() -> None:
    text = "Hello there. How are you today, my friend? I am fine, thanks."
    splitter = sentences.Splitter()
    pieces = [piece for char in text for piece in splitter.feed(char)] + splitter.flush()
    assert pieces == sentences.split(text)
    assert " ".join(pieces) == text


def test_endless_text_is_cut_at_a_space() -> None:
    pieces = sentences.split("word " * 200)
    assert len(pieces) > 1 and all(len(piece) <= 300 for piece in pieces)
    assert " ".join(pieces).split() == ["word"] * 200
