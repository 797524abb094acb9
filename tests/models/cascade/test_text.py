"""The cascade's pure parts: the built-in responder, spoken arithmetic, sentence pieces."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


class CountingPattern:
    """A compiled pattern that adds up the characters each search is given to scan."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.scanned = 0

    def _count(self, text: str, pos: int, endpos: int | None) -> None:
        self.scanned += max(0, min(len(text), len(text) if endpos is None else endpos) - pos)

    def search(self, text: str, pos: int = 0, endpos: int | None = None) -> Any:
        self._count(text, pos, endpos)
        return self.pattern.search(text, pos, len(text) if endpos is None else endpos)

    def finditer(self, text: str, pos: int = 0, endpos: int | None = None) -> Any:
        self._count(text, pos, endpos)
        return self.pattern.finditer(text, pos, len(text) if endpos is None else endpos)


@pytest.mark.parametrize("streamed", [False, True])
def test_splitting_scans_each_character_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch, streamed: bool
) -> None:
    # The attack: "say" and 200 KB of words with no sentence end; the old splitter searched
    # the whole rest of the text for every piece it cut (quadratic: 3.4 s on the event loop).
    patterns = [CountingPattern(sentences._SENTENCE_END), CountingPattern(sentences._CLAUSE_END)]
    monkeypatch.setattr(sentences, "_SENTENCE_END", patterns[0])
    monkeypatch.setattr(sentences, "_CLAUSE_END", patterns[1])
    text = "say " + "word, " * 2 + "word " * 40_000
    if streamed:
        splitter = sentences.Splitter()
        chunks = [text[i : i + 7] for i in range(0, len(text), 7)]
        pieces = [piece for chunk in chunks for piece in splitter.feed(chunk)] + splitter.flush()
    else:
        pieces = sentences.split(text)
    assert " ".join(pieces).split() == text.split()
    assert sum(p.scanned for p in patterns) <= 4 * len(text)  # linear: a constant per character


@given(st.text(alphabet=st.sampled_from(list("ab1 .,!?-:;")), max_size=2_000), st.integers(1, 50))
def test_pieces_are_bounded_keep_every_word_and_do_not_depend_on_chunking(text: str, chunk: int) -> None:
    whole = sentences.split(text)
    assert all(0 < len(piece) <= sentences.MAX_PIECE_CHARS for piece in whole)
    assert " ".join(whole).split() == text.split()
    splitter = sentences.Splitter()
    streamed = [p for i in range(0, len(text), chunk) for p in splitter.feed(text[i : i + chunk])]
    streamed += splitter.flush()
    assert " ".join(streamed).split() == text.split()
    assert all(0 < len(piece) <= sentences.MAX_PIECE_CHARS for piece in streamed)


def test_one_long_sentence_is_cut_into_bounded_pieces() -> None:
    sentence = " ".join(["the quick brown fox jumps over the lazy dog"] * 70) + "."
    for pieces in (sentences.split(sentence), sentences.bound(sentence)):
        assert len(pieces) > 10 and all(len(piece) <= sentences.MAX_PIECE_CHARS for piece in pieces)
        assert " ".join(pieces) == sentence
    assert sentences.bound("Short, and sweet.") == ["Short, and sweet."]  # no early clause cut


def test_a_huge_repeat_is_cut_and_says_so() -> None:
    said = responder.reply("say " + "word " * 50_000, NOW)
    assert len(said) < responder.MAX_HEARD_CHARS + 100
    assert said.startswith("Word word") and said.endswith(responder.TOO_LONG_TO_REPEAT)
    assert "wor " not in said + " "  # cut between words
    assert responder.reply("say " + "word " * 100, NOW) == "Word" + " word" * 99 + "."


# What recognisers really wrote for what users said (issue 15): Whisper tiny.en on espeak-ng.
@pytest.mark.parametrize(
    ("heard", "expected"),
    [
        ("What in 7 plus 5?", "7 plus 5 is 12."),  # "what is seven plus five", 7 of 21 sessions
        ("what in seven plus five", "7 plus 5 is 12."),
        ("Um, what is seven plus five?", "7 plus 5 is 12."),
        ("So, uh, what's twelve times 7?", "12 times 7 is 84."),
        ("What is twenty-one plus three?", "21 plus 3 is 24."),
        ("What is 7 plus for?", "7 plus 4 is 11."),
        ("What is seven time five?", "7 times 5 is 35."),
        ("What's 2 plus 2 equal to?", "2 plus 2 is 4."),
        ("What is 7 plus i?", "I heard 7 plus, but not the last number. Could you say the sum again?"),
        ("Repeat after be, purple elephants dance slowly.", "Purple elephants dance slowly."),
        ("Repeats after me, the cat sat.", "The cat sat."),
        ("Repeat after me, um, the cat sat.", "The cat sat."),
        ("Uh, what time is it?", "It's 5:42 PM."),
        ("What tim is it?", "It's 5:42 PM."),
        ("What can you too?", responder.HELP),
        ("Um.", responder.NOT_HEARD),
    ],
)
def test_responder_survives_what_recognisers_mishear(heard: str, expected: str) -> None:
    assert responder.reply(heard, NOW) == expected


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        ("What time is it?", "It's 5:42 PM."),  # a near-miss operator is one only between numbers
        ("I need 2 times more", responder.FALLBACK),  # a long last word is meant, not a lost number
        ("call 5 times", "I can't call or message anyone."),
        ("what is the meaning of life", responder.FALLBACK),
        ("Tell me a story.", responder.FALLBACK),
        ("Repeat the question", responder.FALLBACK),
        ("heard it", responder.FALLBACK),
    ],
)
def test_forgiveness_does_not_invent_sums_or_commands(said: str, expected: str) -> None:
    assert responder.reply(said, NOW) == expected


_UTTERANCES = [
    "what is seven plus five",
    "what time is it",
    "repeat after me the cat sat on the mat",
    "what can you do",
    "tell me about quantum physics",
]


@given(
    st.sampled_from(_UTTERANCES),
    st.lists(st.tuples(st.integers(0, 12), st.sampled_from(["um", "uh,", "Um,", "uhm", "er", "hmm"]))),
)
def test_fillers_anywhere_change_nothing(said: str, fillers: list[tuple[int, str]]) -> None:
    words = said.split()
    for position, filler in fillers:
        words.insert(min(position, len(words)), filler)
    assert responder.reply(" ".join(words), NOW) == responder.reply(said, NOW)
