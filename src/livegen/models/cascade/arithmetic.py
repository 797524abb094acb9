"""Spoken arithmetic: "what is 12 times seven" -> "12 times 7 is 84."

Whisper writes numbers as digits mostly and as words sometimes, and operators
as words ("times", "divided by") or symbols; ``answer`` accepts both. The
parser is a small recursive descent over a token list (numbers, ``+ - * / ^``,
``sqrt``), never ``eval``: the input is whatever a stranger said.

Recognisers mishear, so the sum is looked for inside what was said rather
than required to be all of it: a few words before it are dropped whatever
they are ("What in 7 plus 5?" is Whisper's "what is seven plus five"), and
so are polite words after it. Words that sound like a number stand for it
only where a number must be ("7 plus for"), and words that sound like an
operator only between two numbers ("7 time 5"), so "what time is it" stays
a question about the clock. A sum whose last number was lost ("What is 7
plus i?") is not guessed: the answer says which part was heard and asks
again, instead of claiming it cannot do sums.
"""

from __future__ import annotations

import math
import re

_UNITS = {
    "zero": 0, "oh": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
    "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}  # fmt: skip
_TENS = {
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
}
_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000}

#: Phrases to operator tokens, longest first so "multiplied by" wins over "by".
_OPERATORS = [
    ("to the power of", "^"), ("raised to", "^"), ("square root of", "sqrt"), ("root of", "sqrt"),
    ("multiplied by", "*"), ("divided by", "/"), ("percent of", "% of"), ("take away", "-"),
    ("squared", "^ 2"), ("cubed", "^ 3"), ("plus", "+"), ("add", "+"), ("minus", "-"),
    ("times", "*"), ("x", "*"), ("×", "*"), ("over", "/"), ("÷", "/"), ("**", "^"),
]  # fmt: skip
_SPOKEN = {"+": "plus", "-": "minus", "*": "times", "/": "divided by", "^": "to the power of"}
_PREFIX = re.compile(r"^(?:so |ok |okay |hey |please )*(?:what(?:'s| is)|how much is|calculate|compute)\s+")
_TOKEN = re.compile(r"\d+(?:\.\d+)?|\*\*|sqrt|[-+*/^×÷()%]|[a-z]+")

Token = float | str


#: Words dropped before the sum, whatever they are; more than this is not a question about a sum.
MAX_PREAMBLE_WORDS = 5
#: Heard for a number word where a number must be.
_SOUNDS_LIKE_NUMBER = {
    "for": "four", "fore": "four", "to": "two", "too": "two", "ate": "eight", "won": "one",
    "tree": "three", "fife": "five", "sicks": "six", "nein": "nine", "tin": "ten",
}  # fmt: skip
#: Heard for an operator between two numbers.
_SOUNDS_LIKE_OPERATOR = {
    "time": "*", "tines": "*", "plush": "+", "plas": "+", "pluss": "+", "plos": "+", "bless": "+",
    "mines": "-", "minis": "-", "minas": "-", "mine": "-", "divide": "/", "divides": "/",
    "multiply": "*", "multiplied": "*", "into": "*",
}  # fmt: skip
#: Said after a sum without changing it.
_TRAILING = {"is", "equals", "equal", "to", "please", "then", "now", "again", "for", "me", "exactly"}
_SKIPPED = {"the", "of", "is", "by", "and", "equals", "equal", "to"}
_SYMBOLS = {"+", "-", "*", "/", "^", "(", ")", "sqrt"}
_BINARY = {"+", "-", "*", "/", "^"}


class NotArithmetic(ValueError):
    pass


class MissingNumber(NotArithmetic):
    """A sum whose last number was not understood; ``heard`` is what came before it."""

    def __init__(self, heard: list[Token]) -> None:
        super().__init__("missing number")
        self.heard = heard


def answer(said: str) -> str | None:
    """The spoken answer if ``said`` is a sum, else None."""
    try:
        tokens = tokenize(said)
        if not any(t in _SPOKEN or t == "sqrt" for t in tokens):
            return None
        value = Parser(tokens).parse()
    except MissingNumber as missing:
        return f"I heard {speak(missing.heard)}, but not the last number. Could you say the sum again?"
    except NotArithmetic:
        return None
    except ZeroDivisionError:
        return "You can't divide by zero."
    except (OverflowError, ValueError):
        return "That number is too big for me."
    return f"{speak(tokens)} is {format_number(value)}."


def tokenize(said: str) -> list[Token]:
    text = _PREFIX.sub("", said.lower().strip(" ?!.")).replace(",", "")
    text = re.sub(r"(?<=[a-z])-(?=[a-z])", " ", text)  # "twenty-one" is one number, not a minus
    text = re.sub(r"(\d)\s*%", r"\1 percent", text)
    for phrase, symbol in _OPERATORS:
        text = re.sub(rf"(?<![a-z]){re.escape(phrase)}(?![a-z])", f" {symbol} ", text)
    text = text.replace("% of", " * 0.01 * ").replace("percent", " * 0.01 ")
    words = _trim(_near_misses(_TOKEN.findall(text)))
    return _merge_number_words(words)


def _is_number(word: str) -> bool:
    return word[:1].isdigit() or word in _UNITS or word in _TENS


def _near_misses(words: list[str]) -> list[str]:
    """Words that sound like a number or an operator, read as one where only that fits."""
    fixed = list(words)
    for i, word in enumerate(words):
        before = fixed[i - 1] if i > 0 else ""
        after = words[i + 1] if i + 1 < len(words) else ""
        after = _SOUNDS_LIKE_NUMBER.get(after, after) if after not in _TRAILING else after
        if word in _SOUNDS_LIKE_NUMBER and before in _BINARY:
            fixed[i] = _SOUNDS_LIKE_NUMBER[word]
        elif word in _SOUNDS_LIKE_OPERATOR and _is_number(before) and _is_number(after):
            fixed[i] = _SOUNDS_LIKE_OPERATOR[word]
    return fixed


def _trim(words: list[str]) -> list[str]:
    """The words from the sum's first number to its last word, polite words after it dropped."""
    start = next((i for i, w in enumerate(words) if _is_number(w) or w in ("sqrt", "-", "(")), None)
    if start is None or start > MAX_PREAMBLE_WORDS:
        raise NotArithmetic("no sum near the start")
    end = len(words)
    while end > start + 1 and words[end - 1] in _TRAILING and words[end - 2] not in _BINARY:
        end -= 1
    return words[start:end]


def _merge_number_words(words: list[str]) -> list[Token]:
    tokens: list[Token] = []
    number: list[str] = []
    for index, word in enumerate([*words, ""]):
        if word in _UNITS or word in _TENS or (word in _SCALES and number) or (word == "and" and number):
            number.append(word)
            continue
        if number:
            tokens.append(_words_to_number([w for w in number if w != "and"]))
            number = []
        if word and word[0].isdigit():
            tokens.append(float(word))
        elif word in _SYMBOLS:
            tokens.append(word)
        elif word and word not in _SKIPPED:
            if _is_lost_number(index, word, words, tokens):
                raise MissingNumber(tokens)
            raise NotArithmetic(word)
    return tokens


def _is_lost_number(index: int, word: str, words: list[str], tokens: list[Token]) -> bool:
    """Whether ``word`` ends the sum where its last number should be, and is short enough to be
    a number misheard ("i" for "five"), not a word the speaker meant ("2 times more")."""
    return index == len(words) - 1 and len(word) <= 3 and len(tokens) > 1 and tokens[-1] in _BINARY


def _words_to_number(words: list[str]) -> float:
    total, current = 0, 0
    for word in words:
        if word in _UNITS:
            current += _UNITS[word]
        elif word in _TENS:
            current += _TENS[word]
        elif word == "hundred":
            current = max(current, 1) * 100
        else:
            total += max(current, 1) * _SCALES[word]
            current = 0
    return float(total + current)


class Parser:
    """expr := term (('+'|'-') term)*; term := power (('*'|'/') power)*; power := unary ('^' power)?."""

    def __init__(self, tokens: list[Token]) -> None:
        self._tokens = tokens
        self._index = 0

    def parse(self) -> float:
        value = self._expression()
        if self._index != len(self._tokens):
            raise NotArithmetic(f"unexpected {self._tokens[self._index]!r}")
        return value

    def _peek(self) -> Token | None:
        return self._tokens[self._index] if self._index < len(self._tokens) else None

    def _take(self) -> Token:
        token = self._peek()
        if token is None:
            raise NotArithmetic("the sum ends too early")
        self._index += 1
        return token

    def _expression(self) -> float:
        value = self._term()
        while self._peek() in ("+", "-"):
            value = value + self._term() if self._take() == "+" else value - self._term()
        return value

    def _term(self) -> float:
        value = self._power()
        while self._peek() in ("*", "/"):
            value = value * self._power() if self._take() == "*" else value / self._power()
        return value

    def _power(self) -> float:
        base = self._unary()
        if self._peek() == "^":
            self._take()
            exponent = self._power()
            if abs(exponent) > 100:
                raise OverflowError
            return float(base**exponent)
        return base

    def _unary(self) -> float:
        token = self._take()
        if token == "-":
            return -self._unary()
        if token == "sqrt":
            return math.sqrt(self._unary())
        if token == "(":
            value = self._expression()
            if self._take() != ")":
                raise NotArithmetic("unbalanced brackets")
            return value
        if isinstance(token, float):
            return token
        raise NotArithmetic(f"expected a number, got {token!r}")


def speak(tokens: list[Token]) -> str:
    words = [format_number(t) if isinstance(t, float) else _SPOKEN.get(t, t) for t in tokens]
    text = " ".join(words).replace("sqrt", "the square root of").replace("( ", "(").replace(" )", ")")
    text = text.replace("times 0.01 times", "percent of")
    return text[:1].upper() + text[1:]


def format_number(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        raise OverflowError
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"
