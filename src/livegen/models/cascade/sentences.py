"""Cutting streamed reply text into pieces that are spoken one at a time.

Speech synthesis works a sentence at a time, and the first audio of a reply
waits for its first piece. So ``Splitter`` emits a piece as soon as a
sentence ends, and cuts the very first piece earlier, at a clause boundary
(comma, colon, semicolon, dash) once it holds a few words: the user hears the
start of the answer while the rest is synthesised.

No piece is longer than ``MAX_PIECE_CHARS``: a longer sentence is cut at its
last clause or space before that. The bound is what keeps a speech worker's
job short (a cancel or another session waits at most one piece), and it is
also what makes splitting linear: every search looks at one piece's window
of text, never at the rest of the reply, whatever a client made it say.
"""

from __future__ import annotations

import re

#: A sentence ends at . ! ? (not inside a number like 3.5) followed by space.
_SENTENCE_END = re.compile(r"(?<!\d)[.!?]+[\"')\]]*\s+|(?<=\d)[.!?]+[\"')\]]*\s+(?=\D)")
_CLAUSE_END = re.compile(r"[,;:]\s+|\s+[-–—]\s+")
#: The first piece is cut at a clause only past this many words, so it is not a lone "Well,".
_MIN_FIRST_WORDS = 4
#: The longest piece: about 13 s of speech, a second or so of synthesis.
MAX_PIECE_CHARS = 200
#: Characters past the limit a sentence end needs to be recognised (its space and the next character).
_LOOKAHEAD = 2
#: A search for a sentence end resumes this far before where the last one gave up: an end that
#: was cut short by the end of the text ("3." waiting for its space) starts there.
_RESUME_MARGIN = 4


class Splitter:
    def __init__(self, early_first: bool = True) -> None:
        #: Text not yet emitted starts at ``_start``; compacted after every feed, so it stays short.
        self._text = ""
        self._start = 0
        #: Where the last search for a sentence end gave up: text before it holds none.
        self._searched_to = 0
        self._num_pieces = 0 if early_first else 1

    def feed(self, delta: str) -> list[str]:
        """Pieces completed by ``delta``, in order."""
        self._text += delta
        pieces = self._pieces(final=False)
        self._text, self._searched_to = self._text[self._start :], self._searched_to - self._start
        self._start = 0
        return pieces

    def flush(self) -> list[str]:
        """What is left at the end of the reply, in pieces of at most ``MAX_PIECE_CHARS``."""
        pieces = self._pieces(final=True)
        rest = self._text[self._start :].strip()
        self._text, self._start, self._searched_to = "", 0, 0
        return [*pieces, rest] if rest else pieces

    def _pieces(self, final: bool) -> list[str]:
        pieces: list[str] = []
        while (cut := self._cut(final)) is not None:
            piece, self._start = self._text[self._start : cut].strip(), cut
            if piece:
                self._num_pieces += 1
                pieces.append(piece)
        return pieces

    def _cut(self, final: bool) -> int | None:
        """Where the next piece ends, looking only at its window; None: wait for more text."""
        start, limit = self._start, self._start + MAX_PIECE_CHARS
        end = min(len(self._text), limit + _LOOKAHEAD)
        resume = max(start, self._searched_to - _RESUME_MARGIN)
        sentence = _SENTENCE_END.search(self._text, resume, end)
        self._searched_to = sentence.start() if sentence is not None else end
        if sentence is not None and sentence.end() > limit:
            sentence = None
        if self._num_pieces == 0 and (clause := self._first_clause(start, sentence)) is not None:
            return clause
        if sentence is not None:
            return sentence.end()
        if len(self._text) >= limit + _LOOKAHEAD or (final and len(self._text) > limit):
            return self._forced_cut(start, limit)
        return None

    def _first_clause(self, start: int, sentence: re.Match[str] | None) -> int | None:
        """The end of the first clause holding enough words, before the first sentence ends."""
        stop = sentence.start() if sentence is not None else min(len(self._text), start + MAX_PIECE_CHARS)
        words, counted = 0, start
        for clause in _CLAUSE_END.finditer(self._text, start, stop):
            words += len(self._text[counted : clause.start()].split())
            counted = clause.start()
            if words >= _MIN_FIRST_WORDS:
                return clause.end()
        return None

    def _forced_cut(self, start: int, limit: int) -> int:
        """A cut in a window with no sentence end: its last clause, else its last space, else the limit."""
        clause_end = None
        for clause in _CLAUSE_END.finditer(self._text, start + MAX_PIECE_CHARS // 2, limit):
            clause_end = clause.end()
        if clause_end is not None:
            return clause_end
        space = self._text.rfind(" ", start + 1, limit)
        return space + 1 if space > 0 else limit


def split(text: str) -> list[str]:
    """All pieces of a complete reply."""
    splitter = Splitter()
    return [*splitter.feed(text), *splitter.flush()]


def bound(text: str) -> list[str]:
    """``text`` as it is if it is short enough, else cut at sentences (then clauses, spaces) into pieces."""
    if len(text) <= MAX_PIECE_CHARS:
        return [text]
    splitter = Splitter(early_first=False)
    return [*splitter.feed(text), *splitter.flush()]
