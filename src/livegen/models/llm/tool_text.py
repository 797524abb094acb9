"""Function calls the embedded model writes as text, read back as calls.

Qwen's chat template asks for ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, which
llama.cpp turns into ``tool_calls``; Qwen2.5-Coder-1.5B often writes the JSON bare, or in a code
fence, and llama.cpp then passes it on as words (measured: "What's the weather in Paris?" with a
``get_weather`` tool was answered, aloud, ``{"name": "get_weather", "arguments": {"city":
"Paris"}}``). So while a session has tools, an answer whose first characters could begin such a
call is held; at its end, a JSON object naming a declared function with object arguments is that
call, and anything else is released as the words it was. Words that cannot begin a call are
passed on at once, so a spoken answer is never delayed.
"""

from __future__ import annotations

import json
from typing import Any

from livegen.models.cascade.chat_stream import ToolCall

#: What a call written as text may start with, once leading blanks are dropped.
OPENINGS = ("{", "<tool_call>", "```")


class ToolText:
    def __init__(self, declared: frozenset[str]) -> None:
        self._declared = declared
        self._held: list[str] | None = [] if declared else None
        self._count = 0

    def feed(self, text: str) -> str:
        """The words to pass on now ("" while they may still be a call)."""
        if self._held is None:
            return text
        self._held.append(text)
        head = "".join(self._held).lstrip()
        if not head or any(opening.startswith(head[: len(opening)]) for opening in OPENINGS):
            return ""
        held, self._held = "".join(self._held), None
        return held

    def finish(self) -> tuple[str, ToolCall | None]:
        """At the answer's end: the held words, or the call they were (and no words)."""
        if self._held is None:
            return "", None
        held, self._held = "".join(self._held), None
        call = self._call(held)
        return ("", call) if call is not None else (held, None)

    def _call(self, text: str) -> ToolCall | None:
        body = text.strip().removeprefix("<tool_call>").removesuffix("</tool_call>").strip()
        body = body.removeprefix("```json").removeprefix("```").removesuffix("```").strip()
        try:
            value: Any = json.loads(body)
        except ValueError:
            return None
        if not isinstance(value, dict) or value.get("name") not in self._declared:
            return None
        arguments = value.get("arguments", value.get("parameters", {}))
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                return None
        if not isinstance(arguments, dict):
            return None
        self._count += 1
        return ToolCall(f"call_text_{self._count}", value["name"], json.dumps(arguments))
