"""``usage`` on ``response.done``: the tokens a response cost, and the rule for audio tokens.

A model that counts tokens reports them with its ``RESPONSE_DONE`` (the cascade
passes on what its chat-completions endpoint reported, ``prompt_tokens``,
``completion_tokens`` and ``prompt_tokens_details.cached_tokens``); they become
text tokens. Audio tokens are the tokens a model consumed or produced *as
audio*: a cascade hears through a speech recogniser and speaks through a
synthesiser, so its language model sees text only and its audio token counts
are 0. A model that reports nothing (the built-in responder) gets counted words
instead: whitespace-separated words of the text it was given (instructions and
history) and of what it said, so the numbers are comparable between responses,
not billing figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from livegen.models.voice import Usage
from livegen.voice.conversation import Item


def to_wire(input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """OpenAI's Realtime usage object, all tokens text tokens (see the module docstring)."""
    return {
        "total_tokens": input_tokens + output_tokens,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "input_token_details": {
            "text_tokens": input_tokens,
            "audio_tokens": 0,
            "image_tokens": 0,
            "cached_tokens": cached_tokens,
            "cached_tokens_details": {"text_tokens": cached_tokens, "audio_tokens": 0, "image_tokens": 0},
        },
        "output_token_details": {"text_tokens": output_tokens, "audio_tokens": 0},
    }


def reported(usage: Usage) -> dict[str, Any]:
    return to_wire(usage.input_tokens, usage.output_tokens, usage.cached_tokens)


def words(*texts: str) -> int:
    return sum(len(text.split()) for text in texts)


def counted(request_words: int, outputs: Sequence[Item]) -> dict[str, Any]:
    """Words in, words out: for a model that counts no tokens."""
    said = sum(
        len((item.text or "").split()) + (1 if item.type == "function_call" else 0) for item in outputs
    )
    return to_wire(request_words, said)
