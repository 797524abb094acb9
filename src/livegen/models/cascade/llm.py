"""Replies from a language model: any OpenAI-compatible chat-completions endpoint, streamed.

vLLM, llama.cpp's server, Ollama and OpenAI itself all speak
``POST {base_url}/chat/completions`` with ``stream: true`` and answer with
server-sent events whose ``choices[0].delta.content`` carry the text. That
is the whole protocol this client needs, so it is a few lines of httpx rather
than an SDK. The prompt is the session's history as the listener heard it
(truncated assistant turns included), so the model knows where it was
interrupted. One ``Client`` per stream: its connection pool belongs to the
stream's event loop.

Function tools go to the endpoint as ``tools``/``tool_choice``; the model's
calls come back as ``delta.tool_calls`` fragments keyed by ``index``. vLLM sends
a call's ``id`` and ``function.name`` first and its ``arguments`` in pieces;
Ollama sends each call whole in one chunk. ``_Parser`` joins both the same way
and yields each call whole (``ToolCall``) when the choice finishes. The usage
the endpoint reports (``stream_options.include_usage``) arrives in a last chunk
without choices, after ``finish_reason``, so the stream is read to ``[DONE]``.
In history, the calls of one answer become one assistant message with
``tool_calls``, and each output a ``tool`` message (OpenAI's chat format).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from livegen.errors import ModelError
from livegen.models.voice import HistoryTurn, Usage

logger = logging.getLogger("livegen.models.cascade")

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
    #: The endpoint's context window in tokens (``--llm-context-tokens``); None: never cut.
    context_tokens: int | None = None


@dataclass(frozen=True)
class ToolCall:
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Finish:
    """The end of a reply: the endpoint's ``finish_reason`` and its usage, if reported."""

    reason: str
    usage: Usage | None = None


Event = str | ToolCall | Finish
Chat = list[dict[str, Any]]


def messages(history: Sequence[HistoryTurn], user_text: str, instructions: str) -> Chat:
    """Chat messages for a reply to ``user_text`` after ``history``.

    The last user turn of ``history`` may still lack its transcript (the
    response was asked for before the transcript landed): ``user_text`` fills
    it, or is appended when the history does not end with the user (or with a
    tool's output, which is what the model answers then).
    """
    result: Chat = [{"role": "system", "content": instructions or DEFAULT_INSTRUCTIONS}]
    for turn in filled(history, user_text):
        if turn.kind == "function_call":
            call = {
                "id": turn.call_id,
                "type": "function",
                "function": {"name": turn.name, "arguments": turn.text},
            }
            last = result[-1]
            if last["role"] == "assistant":  # the words said before the calls, in the same answer
                last.setdefault("tool_calls", []).append(call)
            else:
                result.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif turn.kind == "function_call_output":
            result.append({"role": "tool", "tool_call_id": turn.call_id, "content": turn.text})
        elif turn.role in ("user", "assistant", "system") and turn.text:
            result.append({"role": turn.role, "content": turn.text})
    return result


def estimate_tokens(value: Any) -> int:
    """About a token per four characters of JSON: a bound for budgeting, not a tokenizer."""
    return len(json.dumps(value, ensure_ascii=False)) // 4 + 1


def fit(chat: Chat, tools: Sequence[Any], settings: Settings, truncation: str | float = "auto") -> Chat:
    """``chat`` cut to the endpoint's window: the oldest turns leave first, never the instructions
    (the system message) or the tools, and a call leaves with its outputs.

    ``truncation`` is OpenAI's: ``disabled`` never cuts; ``auto`` cuts just enough; a retention
    ratio, once a cut is needed, keeps only that fraction of the window for the conversation (so
    the next turns fit without cutting again, and a cached prompt prefix lasts longer).
    """
    if settings.context_tokens is None or truncation == "disabled":
        return chat
    budget = (
        settings.context_tokens
        - settings.max_tokens
        - estimate_tokens(chat[0])
        - estimate_tokens(list(tools))
    )
    sizes = [estimate_tokens(message) for message in chat[1:]]
    if sum(sizes) <= budget:
        return chat
    target = budget if isinstance(truncation, str) else int(budget * truncation)
    start, total = 1, sum(sizes)
    while start < len(chat) - 1 and (total > target or chat[start]["role"] == "tool"):
        total -= sizes[start - 1]
        start += 1
    logger.info(
        "context: dropped the %d oldest messages (about %d tokens) to fit %d tokens",
        start - 1,
        sum(sizes) - total,
        settings.context_tokens,
    )
    return [chat[0], *chat[start:]]


def filled(history: Sequence[HistoryTurn], user_text: str) -> list[HistoryTurn]:
    """``history`` ending with the user saying ``user_text`` (filling an empty last user turn)."""
    turns = list(history)
    if turns and turns[-1].kind == "function_call_output":
        return turns
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

    async def stream(
        self,
        chat: Chat,
        tools: Sequence[Any] = (),
        tool_choice: Any = "auto",
        max_tokens: int | None = None,
    ) -> AsyncIterator[Event]:
        """Text deltas as the server sends them, then each tool call whole, then one ``Finish``."""
        import httpx

        body: dict[str, Any] = {"model": self.settings.model, "messages": chat, "stream": True}
        body["max_tokens"] = min(self.settings.max_tokens, max_tokens or self.settings.max_tokens)
        body["stream_options"] = {"include_usage": True}
        if tools:
            body["tools"] = list(tools)
            body["tool_choice"] = tool_choice
        parser = _Parser(self._url())
        try:
            async with self._http.stream("POST", "chat/completions", json=body) as response:
                if response.status_code != 200:
                    detail = (await response.aread()).decode(errors="replace")[:300]
                    raise ModelError(f"{self._url()} answered {response.status_code}: {detail}")
                async for line in response.aiter_lines():
                    events = parser.feed(line)
                    if events is None:
                        break
                    for event in events:
                        yield event
        except httpx.HTTPError as exc:
            raise ModelError(f"cannot reach the language model at {self._url()}: {exc!r}") from exc
        for event in parser.finish():
            yield event

    async def aclose(self) -> None:
        await self._http.aclose()

    def _url(self) -> str:
        return f"{self.settings.base_url.rstrip('/')}/chat/completions"


class _Parser:
    """Server-sent events of one streamed chat completion -> text, whole tool calls, the finish."""

    def __init__(self, url: str) -> None:
        self._url = url
        #: index -> [id, name, arguments so far], in the order the calls began.
        self._calls: dict[int, list[str]] = {}
        self._reason = ""
        self._usage: Usage | None = None

    def feed(self, line: str) -> list[Event] | None:
        """The text in one line (tool-call fragments are kept); None at ``[DONE]``."""
        if not line.startswith("data:"):
            return []
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            return None
        try:
            chunk: Any = json.loads(data)
            choice = chunk["choices"][0] if chunk.get("choices") else {}
            delta = choice.get("delta") or {}
            self._take_usage(chunk.get("usage"))
            for fragment in delta.get("tool_calls") or ():
                self._take_call(fragment)
        except (ValueError, AttributeError, KeyError, IndexError, TypeError):
            raise ModelError(f"the language model sent a malformed event: {data[:200]}") from None
        if choice.get("finish_reason"):
            self._reason = str(choice["finish_reason"])
        content = delta.get("content")
        return [content] if isinstance(content, str) and content else []

    def _take_call(self, fragment: dict[str, Any]) -> None:
        index = fragment.get("index", len(self._calls))
        call = self._calls.setdefault(int(index), ["", "", ""])
        function = fragment.get("function") or {}
        call[0] = call[0] or str(fragment.get("id") or "")
        call[1] = call[1] or str(function.get("name") or "")
        arguments = function.get("arguments")
        # Ollama (and some servers) send arguments as an object rather than JSON text.
        call[2] += arguments if isinstance(arguments, str) else json.dumps(arguments) if arguments else ""

    def _take_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        details = usage.get("prompt_tokens_details") or {}
        self._usage = Usage(
            int(usage.get("prompt_tokens") or 0),
            int(usage.get("completion_tokens") or 0),
            int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0,
        )

    def finish(self) -> list[Event]:
        calls: list[Event] = [ToolCall(c[0], c[1], c[2] or "{}") for c in self._calls.values() if c[1]]
        return [*calls, Finish(self._reason or "stop", self._usage)]
