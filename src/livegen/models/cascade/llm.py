"""Replies from a language model: any OpenAI-compatible chat-completions endpoint, streamed.

vLLM, llama.cpp's server, Ollama and OpenAI itself all speak
``POST {base_url}/chat/completions`` with ``stream: true`` and answer with
server-sent events whose ``choices[0].delta.content`` carry the text. That
is the whole protocol this client needs, so it is a few lines of httpx rather
than an SDK. The prompt is the session's history as the listener heard it
(truncated assistant turns included), so the model knows where it was
interrupted. One ``Client`` per stream: its connection pool belongs to the
stream's event loop.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from livegen.errors import ModelError
from livegen.models.voice import HistoryTurn

#: Used when neither the session nor the response gives instructions.
DEFAULT_INSTRUCTIONS = (
    "You are a helpful voice assistant. Your words are spoken aloud: answer in one to three short, "
    "plain sentences, with no lists, markdown or emoji."
)


@dataclass(frozen=True)
class Settings:
    base_url: str
    model: str
    api_key: str | None = None
    max_tokens: int = 256
    #: Seconds to wait for the first byte and between chunks.
    timeout_s: float = 30.0


def messages(history: Sequence[HistoryTurn], user_text: str, instructions: str) -> list[dict[str, str]]:
    """Chat messages for a reply to ``user_text`` after ``history``.

    The last user turn of ``history`` may still lack its transcript (the
    response was asked for before the transcript landed): ``user_text`` fills
    it, or is appended when the history does not end with the user.
    """
    result = [{"role": "system", "content": instructions or DEFAULT_INSTRUCTIONS}]
    turns = [t for t in filled(history, user_text) if t.role in ("user", "assistant", "system")]
    result.extend({"role": t.role, "content": t.text} for t in turns if t.text)
    return result


def filled(history: Sequence[HistoryTurn], user_text: str) -> list[HistoryTurn]:
    """``history`` ending with the user saying ``user_text`` (filling an empty last user turn)."""
    turns = list(history)
    if turns and turns[-1].role == "user":
        turns[-1] = HistoryTurn("user", turns[-1].text or user_text)
    elif user_text:
        turns.append(HistoryTurn("user", user_text))
    return turns


class Client:
    def __init__(self, settings: Settings) -> None:
        import httpx

        self.settings = settings
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        self._http = httpx.AsyncClient(
            base_url=settings.base_url.rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(settings.timeout_s, connect=5.0),
        )

    async def stream(self, chat: list[dict[str, str]]) -> AsyncIterator[str]:
        """Text deltas of the reply, as the server sends them."""
        import httpx

        body = {"model": self.settings.model, "messages": chat, "stream": True}
        body["max_tokens"] = self.settings.max_tokens
        try:
            async with self._http.stream("POST", "chat/completions", json=body) as response:
                if response.status_code != 200:
                    detail = (await response.aread()).decode(errors="replace")[:300]
                    raise ModelError(f"{self._url()} answered {response.status_code}: {detail}")
                async for line in response.aiter_lines():
                    if (delta := _delta(line)) is None:
                        break
                    if delta:
                        yield delta
        except httpx.HTTPError as exc:
            raise ModelError(f"cannot reach the language model at {self._url()}: {exc!r}") from exc

    async def aclose(self) -> None:
        await self._http.aclose()

    def _url(self) -> str:
        return f"{self.settings.base_url.rstrip('/')}/chat/completions"


def _delta(line: str) -> str | None:
    """The text in one server-sent-events line; "" for lines without text, None at the end."""
    if not line.startswith("data:"):
        return ""
    data = line[len("data:") :].strip()
    if data == "[DONE]":
        return None
    try:
        chunk: Any = json.loads(data)
        choice = chunk["choices"][0] if chunk.get("choices") else {}
    except (ValueError, AttributeError, KeyError, IndexError, TypeError):
        raise ModelError(f"the language model sent a malformed event: {data[:200]}") from None
    content = (choice.get("delta") or {}).get("content")
    if choice.get("finish_reason") and not content:
        return None
    return content if isinstance(content, str) else ""
