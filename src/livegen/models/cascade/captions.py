"""Live captions: the words of a turn sent while it is spoken, never taken back.

While the user speaks, the stream decodes the turn so far every
``STEP_S`` of new audio (``Stream``). Each decode is a guess that may
change as more audio comes: the last word is often cut, and Whisper revises
earlier words once it hears what follows. ``Agreement`` implements local
agreement: a word is sent once two successive decodes agree on it and on
everything before it, and the last word of the newest decode is never sent,
since the audio may end inside it. What has been sent is a prefix that never
changes; the turn's final transcript (decoded once the turn ends) completes
it with ``rest``.

Pure: the stream owns the timing and the recogniser.
"""

from __future__ import annotations

import re

#: New audio between two live decodes of a turn.
STEP_S = 0.5
#: ``transcription.delay`` -> the step: a longer wait sends captions less often, each decoded
#: over more new audio (fewer revisions of the last words, and less recogniser time).
DELAY_STEP_S = {"minimal": 0.25, "low": STEP_S, "medium": 1.0, "high": 1.5, "xhigh": 2.0}
#: Turns longer than this get no more live decodes: each would cost a full 30 s window.
MAX_LIVE_S = 28.0
_PUNCTUATION = re.compile(r"[^\w']+")


def _key(word: str) -> str:
    return _PUNCTUATION.sub("", word.lower())


class Agreement:
    """Local agreement over successive decodes of one growing turn."""

    def __init__(self) -> None:
        #: The words sent so far, as sent.
        self.sent: list[str] = []
        self._previous: list[str] = []

    @property
    def text(self) -> str:
        return " ".join(self.sent)

    def feed(self, hypothesis: str) -> str:
        """The text to send now for the newest decode: new stable words, or ""."""
        words = hypothesis.split()
        agreed = 0
        for before, now in zip(self._previous, words[:-1], strict=False):
            if _key(before) != _key(now):
                break
            agreed += 1
        self._previous = words
        if agreed <= len(self.sent) or not self._extends_sent(words):
            return ""
        new = words[len(self.sent) : agreed]
        delta = (" " if self.sent else "") + " ".join(new)
        self.sent += new
        return delta

    def rest(self, final: str) -> str | None:
        """What completes the sent words into ``final``; None if ``final`` does not start with them."""
        words = final.split()
        if not self.sent:
            return final
        if not self._extends_sent(words):
            return None
        remaining = " ".join(words[len(self.sent) :])
        return f" {remaining}" if remaining else ""

    def _extends_sent(self, words: list[str]) -> bool:
        return len(words) >= len(self.sent) and all(
            _key(a) == _key(b) for a, b in zip(self.sent, words, strict=False)
        )
