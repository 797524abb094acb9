"""Spoken preambles: a short ``commentary`` item ("Let me check that.") while a slow answer is made.

When the first words of an answer are not ready within ``AFTER_S`` (the language model is
thinking, or an MCP tool is running), the stream speaks a preamble first, as its own message
item in phase ``commentary``, then the answer in phase ``final_answer`` (``OutputKind.PHASE``);
the listener hears something at once instead of silence. A fast answer has no preamble and no
phase, as before.

The session's ``instructions`` ask for it with a line of their own: ``Preamble: <words>`` (the
words to say, at most ``MAX_CHARS``) or ``Preamble: on`` (``DEFAULT``); ``Preamble: off`` (or no
such line) is none. Opt-in, as gpt-realtime-2's preambles are asked for in the instructions: a
client that did not ask gets the one message it always got, whatever the model's speed (and a
test's timing under load cannot add an item). The line stays in the instructions the language
model reads, where it says the same thing.
"""

from __future__ import annotations

import re

#: Seconds an answer's first words may take before a preamble is spoken.
AFTER_S = 0.7
DEFAULT = "Let me check that."
MAX_CHARS = 200
_LINE = re.compile(r"^[ \t]*preamble[ \t]*:[ \t]*(.*?)[ \t]*$", re.IGNORECASE | re.MULTILINE)
_OFF = ("off", "none", "no", "")
_ON = ("on", "yes", "default")


def preamble_for(instructions: str) -> str | None:
    """The words to say while a slow answer is made; None: the instructions ask for none."""
    found = _LINE.search(instructions[:65_536])
    if found is None:
        return None
    words = found.group(1).strip().strip("\"'")
    if words.lower() in _OFF:
        return None
    return DEFAULT if words.lower() in _ON else words[:MAX_CHARS]
