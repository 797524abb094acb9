"""The built-in responder: a few things done well, and a plain "I can't" for the rest.

Without a language model, the voice model still has to answer something
useful the moment a user talks to it: the time, the date, arithmetic,
"repeat after me", help and a little small talk, and for anything else a
sentence that says what it cannot do and how to get more (``--llm-base-url``).
Rules are tried in order and the first that matches answers.

What it reads is a recogniser's guess, so it forgives the usual mistakes:
fillers ("um", "uh") are dropped before any rule looks, sums are found
inside the question (see ``arithmetic``), and when no rule matches, an
utterance that is a near miss of a command ("repeat after be", "what tim
is it") is answered as that command. Near misses are matched on the first
few words only, with a similarity threshold high enough that an unrelated
question still gets the plain "I can't". Pure: the clock
is an argument, so the stream can prepare an answer speculatively and tests
can pin the time.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from datetime import datetime

from livegen.models.cascade import arithmetic

HELP = (
    "I can tell you the time and the date, work out sums like twelve times seven, "
    "repeat after you, and chat a little. For anything else, start livegen with a language model."
)
FALLBACK = (
    "Sorry, I can't answer that. I only know the time, the date, arithmetic, and how to repeat after you."
)
NOT_HEARD = "Sorry, I didn't catch that. Could you say it again?"
#: Said when a response is asked for before the user said anything.
OPENING = "Hello! How can I help you?"
#: Only this much of what the user said is read: every rule is decided by its start, and
#: "repeat after me" repeats at most this much (about five minutes of speech), whatever was sent.
MAX_HEARD_CHARS = 4_000
TOO_LONG_TO_REPEAT = "That is as much as I can repeat at once."

Rule = Callable[[str, datetime], str | None]


def reply(text: str, now: datetime) -> str:
    """The answer to one user utterance, as one or more sentences."""
    said, is_cut = _head(text)
    if not said:
        return NOT_HEARD
    answer = _first_answer(said, now, is_cut)
    if answer is None and (command := near_miss(said)) is not None:
        answer = _first_answer(command, now, is_cut)
    return FALLBACK if answer is None else answer


def _first_answer(said: str, now: datetime, is_cut: bool) -> str | None:
    for rule in RULES:
        if (answer := rule(said, now)) is not None:
            return f"{answer} {TOO_LONG_TO_REPEAT}" if is_cut and rule is repeat else answer
    return None


def _head(text: str) -> tuple[str, bool]:
    """The first ``MAX_HEARD_CHARS`` of ``text``, normalised and cut at a word; whether it was cut."""
    first = _FIRST_CHAR.search(text)
    start = first.start() if first is not None else len(text)
    head = text[start : start + MAX_HEARD_CHARS + 1].rstrip()
    is_cut = len(head) > MAX_HEARD_CHARS
    return _normalise(head[:MAX_HEARD_CHARS].rsplit(None, 1)[0] if is_cut else head), is_cut


_FIRST_CHAR = re.compile(r"\S")


def _normalise(text: str) -> str:
    text = _FILLER.sub(" ", text.strip().lower().replace("’", "'"))
    return " ".join(text.split()).strip(" ,")


#: Hesitations recognisers write down; never part of a command or of what is to be repeated.
_FILLER = re.compile(r"(?<![\w'-])(?:u+m+|u+h+m*|e+r+m*|a+h+|h+m+|mm+)(?![\w'-])[,.…]*")


def _has(said: str, *patterns: str) -> bool:
    return any(re.search(pattern, said) for pattern in patterns)


_REPEAT = re.compile(
    r"^(?:can you |could you |please )?(?:repeat after me|say after me|say)\b[\s,.:;!-]*(.*)$"
)


def repeat(said: str, now: datetime) -> str | None:
    match = _REPEAT.match(said)
    if match is None:
        return None
    words = match.group(1).strip(" .!?\"'")
    return f"{words[:1].upper()}{words[1:]}." if words else "Sure. What should I repeat?"


def help_(said: str, now: datetime) -> str | None:
    if _has(said, r"^help\b", r"\bwhat can you do\b", r"\bwhat do you (?:do|know)\b", r"\bhow do i use\b"):
        return HELP
    return None


def sums(said: str, now: datetime) -> str | None:
    return arithmetic.answer(said)


def time_(said: str, now: datetime) -> str | None:
    if _has(said, r"\bwhat(?:'s| is) the time\b", r"\bwhat time\b", r"^time\b", r"\bthe time\b"):
        hour = now.hour % 12 or 12
        return f"It's {hour}:{now.minute:02d} {'AM' if now.hour < 12 else 'PM'}."
    return None


def date(said: str, now: datetime) -> str | None:
    if _has(said, r"\bdate\b", r"\bwhat day\b", r"\bwhich day\b", r"\bwhat(?:'s| is) today\b"):
        return f"Today is {now:%A, %B} {now.day}, {now.year}."
    if _has(said, r"\bwhat (?:month|year)\b"):
        return f"It's {now:%B} {now.year}."
    return None


_CANNOT: list[tuple[str, str]] = [
    (
        r"\bweather\b|\brain\b|\btemperature outside\b",
        "I can't check the weather: I have no internet connection.",
    ),
    (r"\bnews\b|\bheadlines\b", "I can't read the news: I have no internet connection."),
    (r"\b(?:search|google|look up)\b", "I can't search the web: I have no internet connection."),
    (r"\bplay\b.*\b(?:music|song|radio)\b", "I can't play music, only speak."),
    (r"\b(?:timer|alarm|remind)", "I can't set timers or reminders yet."),
    (r"\b(?:call|text|email|message)\b", "I can't call or message anyone."),
    (r"\bturn (?:on|off)\b|\blights?\b", "I can't control devices."),
]


def cannot(said: str, now: datetime) -> str | None:
    return next((answer for pattern, answer in _CANNOT if re.search(pattern, said)), None)


_SMALL_TALK: list[tuple[str, str]] = [
    (r"\bhow are you\b|\bhow's it going\b", "I'm doing well, thank you. How can I help?"),
    (
        r"\byour name\b|\bwho are you\b|\bwhat are you\b",
        "I'm the livegen voice assistant, running on this computer.",
    ),
    (r"\bthank(?:s| you)\b", "You're welcome."),
    (r"\b(?:good ?bye|bye|see you)\b", "Goodbye. Talk to you soon."),
    (r"\bjoke\b", "Why did the computer go to the doctor? It had a virus."),
    (r"^(?:hi|hello|hey|good (?:morning|afternoon|evening))\b", "Hello! How can I help you?"),
    (r"\b(?:can you hear me|are you there|testing)\b", "Yes, I can hear you."),
]


def small_talk(said: str, now: datetime) -> str | None:
    return next((answer for pattern, answer in _SMALL_TALK if re.search(pattern, said)), None)


RULES: list[Rule] = [repeat, help_, sums, time_, date, cannot, small_talk]
#: The rules whose answers are exact (the clock, the calendar, sums): answered before a
#: language model is asked (``exact``), faster and never wrong the way a small model can be.
EXACT: list[Rule] = [sums, time_, date]


def exact(text: str, now: datetime, has_tools: bool = False) -> str | None:
    """The answer of an ``EXACT`` rule to ``text``, or None (a language model answers it). Without
    tools, what it cannot do (devices, weather...) is said by ``cannot`` too: measured, Qwen
    answered "Please turn on the kitchen lights" with "I turned on the kitchen lights."."""
    said, _ = _head(text)
    rules = EXACT if has_tools else [*EXACT, cannot]
    return next((answer for rule in rules if said and (answer := rule(said, now)) is not None), None)


#: Commands a near miss may stand for; "repeat after me" keeps the words after it.
COMMANDS = [
    "repeat after me", "say after me", "what time is it", "what's the time", "what's the date",
    "what day is it", "what can you do", "help",
]  # fmt: skip
#: How alike (difflib's ratio, 0 to 1) the start of an utterance and a command must be.
NEAR_MISS_RATIO = 0.8
#: Longer than any command with a word more: a 4,000-character "word" is not compared whole.
_MAX_COMMAND_CHARS = 40


def near_miss(said: str) -> str | None:
    """``said`` with its first words replaced by the command they nearly are, or None.

    Only the start is compared (every command is said first), with one word
    more or less than the command, so the cost is bounded whatever was said.
    """
    words = said.split()
    best: tuple[float, str] | None = None
    for command in COMMANDS:
        size = len(command.split())
        for count in {max(1, size - 1), size, size + 1}:
            head = " ".join(words[:count])[:_MAX_COMMAND_CHARS].strip(" .,!?")
            ratio = difflib.SequenceMatcher(None, head, command).ratio()
            if ratio >= NEAR_MISS_RATIO and (best is None or ratio > best[0]):
                best = (ratio, " ".join([command, *words[count:]]))
    return None if best is None else best[1]
