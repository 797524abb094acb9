"""Whether the words heard so far can end an English request: semantic_vad's second opinion.

Smart Turn hears the voice, and on synthetic voices it calls many
mid-sentence pauses complete. The words say more: a transcript that ends in
"the", "for", "and", "to", "my" or "um" is not a whole request in English
("book a table for", "I would like to"), whatever the melody. At a pause the
model calls complete, ``semantic_vad`` holds the turn when the words heard so
far end so (``holds``); the eagerness's maximum wait still ends it if the
user says nothing more, as when the model itself says the turn goes on.

The lists are short on purpose: a word held wrongly costs a whole maximum
wait at a real end, a word missed only leaves the model's verdict standing.
Words that often end a sentence are not held: verb particles ("turn the
lights on", "pick me up"), "that", "so", "her", "his", "though". A
preposition stranded by a question ("what are you looking for?", "who are
you talking to?") ends a sentence too: after a wh-word of the same sentence,
a preposition that follows a pronoun or a verb is not held ("what is the
capital of" still is). A number ends a request ("call me at five"); a
number in progress is one followed by "point", "plus", "minus", "divided
by", "multiplied by" or a dash ("555-").

Pure functions of the transcript: no model, no clock.
"""

from __future__ import annotations

import re


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


ARTICLES = _set("a an the")
#: Possessive and other determiners that need a noun after them ("her"/"his" can end: "call her").
DETERMINERS = _set("my your our their its every")
#: Prepositions that are rarely verb particles ("on", "up", "in", "off" end "turn it on" etc.).
PREPOSITIONS = _set(
    "about against among at between despite during except for from including into of onto per"
    " regarding than to toward towards until upon via with"
)
CONJUNCTIONS = _set("and or but nor because cause if unless whether although as")
#: "to" run into the verb before it: a verb always follows.
INFINITIVES = _set("gonna wanna gotta")
FILLERS = _set("um umm uh uhh er erm uhm")
#: Words after which a number goes on ("three point", "twelve divided by").
NUMBER_LINKS = _set("point plus minus dot")
_OPERATORS = _set("divided multiplied")
_WH_WORDS = _set("what which who whom whose where how what's who's where's")
#: The words a stranded preposition follows: objects and subjects left before it ...
_PRONOUNS = _set("it you me him her them us that this these those one i we they")
#: ... and verbs that take a preposition (their "-ing" and "-ed" forms are recognised by ending).
_VERBS = _set("go come talk speak listen look wait pay belong live work made sent")
#: Before "to", these mean a verb follows: "going to", "want to".
_INFINITIVE_LEADS = _set(
    "going trying planning hoping about able supposed used want wanted need needed like love have has had"
    " got ought"
)
_WORD = re.compile(r"[a-z0-9]+(?:['’][a-z]+)*")
#: A full stop, question or exclamation mark; an ellipsis ("for... four") is a pause, not an end.
_SENTENCE_END = re.compile(r"(?<![.])[.?!](?![.])\s+")
_NUMBER_DASH = re.compile(r"\d\s*[-–]\s*$")


def words(text: str) -> list[str]:
    """The lowercase words of ``text``, punctuation dropped, apostrophes kept ("what's")."""
    return [word.replace("’", "'") for word in _WORD.findall(text.lower())]


def is_unfinished(text: str) -> bool:
    """Whether ``text``, the transcript of a turn so far, cannot end an English request."""
    text = text.strip()
    if _NUMBER_DASH.search(text):
        return True
    sentence = words(_SENTENCE_END.split(text)[-1])
    if not sentence:
        return False
    last = sentence[-1]
    if any(last in held for held in (ARTICLES, DETERMINERS, CONJUNCTIONS, FILLERS, INFINITIVES)):
        return True
    if last in NUMBER_LINKS or (last == "by" and len(sentence) > 1 and sentence[-2] in _OPERATORS):
        return True
    return last in PREPOSITIONS and not _is_stranded(sentence)


def _is_stranded(sentence: list[str]) -> bool:
    """Whether the sentence's last word, a preposition, is left at the end by a wh-word before it.

    The word before the preposition must be one a stranded preposition follows: a pronoun or a
    verb ("what is it for", "where are you from", "who are you talking to", "who did you go
    with"); after a noun the preposition still wants its object ("what is the capital of").
    """
    *head, before, last = ["", *sentence]
    if not any(word in _WH_WORDS for word in head):
        return False
    if last == "to" and before in _INFINITIVE_LEADS:  # "what are you going to": a verb comes
        return False
    return before in _PRONOUNS or before in _VERBS or before.endswith(("ing", "ed"))


def holds(heard: str | None) -> bool:
    """Whether the words hold a turn the end-of-turn model calls complete (None: no words heard,
    the model's verdict stands)."""
    return heard is not None and is_unfinished(heard)
