"""The words that hold semantic_vad's turn: a table of transcripts, as Whisper writes them."""

from __future__ import annotations

import pytest

from livegen.models.cascade import incomplete

UNFINISHED = (
    "I would like to...",
    "Book a table for",
    "Can you tell me the",
    "send a message to",
    "Let me think about",
    "Play something by the Beatles and",
    "I'll have the soup or",
    "Put it on my",
    "Um, I want an",
    "What's the weather in Paris, um",
    "Remind me, uh",
    "I would like to... book a table for",  # an ellipsis is a pause inside the sentence
    "Thanks. Now set an alarm for",  # only the last sentence counts: no wh-word in it
    "The total is three point",
    "What is twelve divided by",
    "My number is 555-",
    "I'm gonna",
    "What are you gonna",
    "It's bigger than",
    "Where is the station? And how far is it from the",
    "What is the capital of",  # a question, but "of" after a noun wants its object
    "What are you going to",
    "What do you want to",
    "What is this button for",  # stranded after a noun: held, a known miss (the bench counts it)
)
FINISHED = (
    "",
    "...",
    "Book a table for four people.",
    "Call me at five.",
    "I need three",  # a number ends a request: "three... no, four" is the model's to hold
    "What's the weather in Paris",
    "Turn the lights on.",  # particles end sentences
    "Can you pick me up?",
    "Call her",
    "I think so",
    "I like that",
    "What are you looking for?",  # prepositions stranded by a question
    "Which one do you want to go with?",
    "Who should I send it to",
    "Where are you from?",
    "Who are you talking to?",
    "What is it for",
    "What's that made of?",
    "Tell me who to go with",
    "Two times three",
    "Stand by",
)


@pytest.mark.parametrize("text", UNFINISHED)
def test_a_transcript_ending_in_a_word_that_needs_more_is_unfinished(text: str) -> None:
    assert incomplete.is_unfinished(text)
    assert incomplete.holds(text)


@pytest.mark.parametrize("text", FINISHED)
def test_a_transcript_that_can_end_a_request_is_not_held(text: str) -> None:
    assert not incomplete.is_unfinished(text)
    assert not incomplete.holds(text)


def test_without_words_the_models_verdict_stands() -> None:
    assert not incomplete.holds(None)


def test_words_are_lowercase_without_punctuation_with_apostrophes() -> None:
    assert incomplete.words("What’s the time, Mr. Smith?") == ["what's", "the", "time", "mr", "smith"]
