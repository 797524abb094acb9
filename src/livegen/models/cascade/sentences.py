"""Cutting streamed reply text into pieces that are spoken one at a time.

Speech synthesis works a sentence at a time, and the first audio of a reply
waits for its first piece. So ``Splitter`` emits a piece as soon as a
sentence ends, and cuts the very first piece earlier, at a clause boundary
(comma, colon, semicolon, dash) once it holds a few words: the user hears the
start of the answer while the rest is synthesised.
"""

from __future__ import annotations

import re

#: A sentence ends at . ! ? (not inside a number like 3.5) followed by space.
_SENTENCE_END = re.compile(r"(?<!\d)[.!?]+[\"')\]]*\s+|(?<=\d)[.!?]+[\"')\]]*\s+(?=\D)")
_CLAUSE_END = re.compile(r"[,;:]\s+|\s+[-–—]\s+")
#: The first piece is cut at a clause only past this many words, so it is not a lone "Well,".
_MIN_FIRST_WORDS = 4
#: A piece with no boundary in sight is cut at a space past this many characters.
_MAX_PIECE_CHARS = 300


class Splitter:
    def __init__(self) -> None:
        self._text = ""
        self._num_pieces = 0

    def feed(self, delta: str) -> list[str]:
        """Pieces completed by ``delta``, in order."""
        self._text += delta
        pieces: list[str] = []
        while (piece := self._next_piece()) is not None:
            pieces.append(piece)
        return pieces

    def flush(self) -> list[str]:
        """What is left at the end of the reply."""
        rest, self._text = self._text.strip(), ""
        return [rest] if rest else []

    def _next_piece(self) -> str | None:
        cut = self._cut()
        if cut is None:
            return None
        piece, self._text = self._text[:cut].strip(), self._text[cut:]
        if not piece:
            return self._next_piece()
        self._num_pieces += 1
        return piece

    def _cut(self) -> int | None:
        sentence = _SENTENCE_END.search(self._text)
        if self._num_pieces == 0:
            for clause in _CLAUSE_END.finditer(self._text):
                if sentence is not None and clause.start() >= sentence.start():
                    break
                if len(self._text[: clause.start()].split()) >= _MIN_FIRST_WORDS:
                    return clause.end()
        if sentence is not None:
            return sentence.end()
        if len(self._text) > _MAX_PIECE_CHARS:
            space = self._text.rfind(" ", 0, _MAX_PIECE_CHARS)
            return space + 1 if space > 0 else _MAX_PIECE_CHARS
        return None


def split(text: str) -> list[str]:
    """All pieces of a complete reply."""
    splitter = Splitter()
    return [*splitter.feed(text), *splitter.flush()]
