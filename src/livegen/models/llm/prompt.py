"""What the embedded assistant is told it is, before the session's own instructions.

Unprompted, the packaged model invents: "the weather is sunny", "Sure, I'll turn on the kitchen
lights", "I am an AI model created by OpenAI" (weights_2026-12.md). So the system prompt says
who it is, the date, and what it cannot do: no live data, no devices, no action it did not take,
and that only the tools it is given are actions it can take. The session's ``instructions``
come after it, so they extend the prompt; they cannot lift it, and what the user says is never
part of it. The date is to the day, not the minute: the system prompt is the cached prefix of
every turn (llama.cpp's prompt cache), and a prompt that changed each minute would be read
again from the start each turn; the time of day is the built-in responder's fast path.
"""

from __future__ import annotations

from datetime import datetime

ASSISTANT = (
    "You are Livegen, a voice assistant running entirely on this computer, with no internet "
    "connection. Today is {date}. Your words are spoken aloud: answer in one to three short, "
    "plain sentences, with no lists, markdown, code or emoji. "
    "You cannot see live data: no weather, news, prices or scores; say so rather than guess. "
    "You cannot control devices, lights, music, timers, calls or messages, and you never say "
    "you did something you did not do. The only actions you can take are the tools you are "
    "given, if any; after a tool answers, tell the user what it said. "
    "If you do not know, say you do not know."
)


def system(now: datetime, instructions: str | None) -> str:
    """The system message: the assistant's prompt for ``now``'s day, then ``instructions``."""
    base = ASSISTANT.format(date=f"{now:%A, %B} {now.day}, {now.year}")
    return f"{base}\n\n{instructions}" if instructions else base
