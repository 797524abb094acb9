"""What a GPT-Live session has used, as ``session.usage.updated`` and ``session.closed`` report it.

``usage.seconds``: whole seconds the session has run (OpenAI bills GPT-Live by
the second, so a second begun counts), by the transport's clock, or by the
input timeline when a client sends audio faster than real time. WebRTC
sessions also get OpenAI's breakdown: inference never pauses here, so every
second is active. ``context_window.usage_ratio``: the tokens in the session's
context after its latest response (the prompt its language model was given
plus what it said, as that model counted them in the response's ``usage``),
over the language model's context window; omitted, as OpenAI omits it, while
no response has reported tokens or when the window is unknown (a remote
endpoint without ``--llm-context-tokens``; the built-in responder has none).

Sans-IO: the transport tells the time (``tell_time``) and each ended response
(``measure``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from livegen.protocol.live import events as live


@dataclass
class Meter:
    #: The context window of the session's language model in tokens (None: unknown, or none).
    context_tokens: int | None = None
    #: Report the WebRTC breakdown (``active_seconds``, ``paused_seconds``).
    breakdown: bool = False
    #: Milliseconds since the session started, by the transport's clock.
    elapsed_ms: int = 0
    #: Tokens in the context after the latest response (None until one reports them).
    context_used: int | None = None

    def tell_time(self, elapsed_ms: int) -> None:
        self.elapsed_ms = max(self.elapsed_ms, elapsed_ms)

    def measure(self, response: dict[str, Any]) -> None:
        """A response ended: the context it left, by its ``usage`` (a model that counts no tokens
        reports words). A delegated task's response runs outside the conversation
        (``conversation: "none"``), so its prompt is not the session's context."""
        usage = response.get("usage")
        if not isinstance(usage, dict) or (response.get("metadata") or {}).get("delegation_id"):
            return
        tokens = int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
        if tokens > 0:
            self.context_used = tokens

    def usage(self, input_ms: int) -> live.Usage:
        seconds = -(-max(self.elapsed_ms, input_ms) // 1000)
        if not self.breakdown:
            return live.Usage(seconds=seconds)
        return live.Usage(seconds=seconds, active_seconds=seconds, paused_seconds=0)

    def window(self) -> live.ContextWindow | None:
        if not self.context_tokens or self.context_used is None:
            return None
        return live.ContextWindow(usage_ratio=min(1.0, self.context_used / self.context_tokens))
