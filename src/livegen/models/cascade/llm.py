"""Replies from a language model: any OpenAI-compatible chat-completions endpoint, streamed.

vLLM, llama.cpp's server, Ollama and OpenAI itself all speak
``POST {base_url}/chat/completions`` with ``stream: true`` and answer with
server-sent events whose ``choices[0].delta.content`` carry the text. That
is the whole protocol this client needs, so it is a few lines of httpx rather
than an SDK. The prompt is the session's history as the listener heard it
(truncated assistant turns included), so the model knows where it was
interrupted. One ``Client`` per stream: its connection pool belongs to the
stream's event loop.

Function tools go to the endpoint as ``tools``/``tool_choice`` (to the embedded model, in its
system message and held to a grammar instead: ``held_to_grammar``); the model's
calls come back as ``delta.tool_calls`` fragments keyed by ``index``. vLLM sends
a call's ``id`` and ``function.name`` first and its ``arguments`` in pieces;
Ollama sends each call whole in one chunk. ``chat_stream.Parser`` joins both the
same way and yields each call whole (``ToolCall``) when the choice finishes;
``chat_stream`` also holds every answer to its deadlines and caps (``LLMLimits``). The usage
the endpoint reports (``stream_options.include_usage``) arrives in a last chunk
without choices, after ``finish_reason``, so the stream is read to ``[DONE]``.
A session's ``reasoning.effort`` goes as ``reasoning_effort``; the model's
thinking never comes back as text (``chat_stream.ThinkFilter``).
In history, the calls of one answer become one assistant message with
``tool_calls``, and each output a ``tool`` message (OpenAI's chat format).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from livegen import tasks
from livegen.models.cascade import chat_stream
from livegen.models.cascade.chat_stream import (
    Event,
    Finish,
    LLMFailed,
    LLMInvalidCall,
    LLMMalformed,
    LLMTimeout,
    LLMTooLarge,
    ToolCall,
)
from livegen.models.llm import prompt, tool_grammar
from livegen.models.llm.tool_text import ToolText
from livegen.models.voice import HistoryTurn, LLMLimits

__all__ = [
    "Event",
    "Finish",
    "LLMFailed",
    "LLMInvalidCall",
    "LLMMalformed",
    "LLMTimeout",
    "LLMTooLarge",
    "ToolCall",
]

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
    #: Seconds the endpoint may stay silent between chunks (the answer's deadlines are in ``limits``).
    timeout_s: float = 30.0
    #: The endpoint's context window in tokens (``--llm-context-tokens``); None: never cut.
    context_tokens: int | None = None
    #: Deadlines and caps of one answer (``--llm-*`` of ``livegen serve``).
    limits: LLMLimits = field(default_factory=LLMLimits)
    #: The embedded model (``livegen.models.llm``): told who it is and what it cannot do
    #: (``prompt.system``, the session's instructions after it), and the built-in responder's
    #: exact answers (time, date, sums) come first.
    is_assistant: bool = False


def assistant_chat(chat: Chat, now: datetime) -> Chat:
    """``chat`` with its system message the assistant's prompt, the session's instructions after
    it (the client's default instructions are the prompt's job, so they are not repeated)."""
    instructions = chat[0]["content"] if chat and chat[0]["role"] == "system" else None
    rest = chat[1:] if instructions is not None else chat
    given = None if instructions == DEFAULT_INSTRUCTIONS else instructions
    return [{"role": "system", "content": prompt.system(now, given)}, *rest]


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
        elif turn.images and turn.role == "user":  # OpenAI's chat image parts, after the words
            parts: list[dict[str, Any]] = [{"type": "text", "text": turn.text}] if turn.text else []
            parts += [{"type": "image_url", "image_url": {"url": u, "detail": d}} for u, d in turn.images]
            result.append({"role": "user", "content": parts})
        elif turn.role in ("user", "assistant", "system") and turn.text:
            result.append({"role": turn.role, "content": turn.text})
    return result


#: What an image costs a prompt, for budgeting: OpenAI's high detail is 85 tokens plus 170 a
#: 512-pixel tile, so about a thousand covers a large one (its base64 would count hundreds of times that).
IMAGE_TOKENS = 1105


def estimate_tokens(value: Any) -> int:
    """About a token per four characters of JSON (an image a fixed ``IMAGE_TOKENS``): a bound for
    budgeting, not a tokenizer."""
    if isinstance(value, dict) and isinstance(value.get("content"), list):
        parts = value["content"]
        images = sum(1 for part in parts if isinstance(part, dict) and part.get("type") == "image_url")
        words = [part for part in parts if not (isinstance(part, dict) and part.get("type") == "image_url")]
        return estimate_tokens({**value, "content": words}) + images * IMAGE_TOKENS
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
        turns[-1] = HistoryTurn("user", turns[-1].text or user_text, images=turns[-1].images)
    elif user_text:
        turns.append(HistoryTurn("user", user_text))
    return turns


def has_images(history: Sequence[HistoryTurn]) -> bool:
    """Whether the user's last message holds images (the built-in responder cannot see them)."""
    return next((bool(turn.images) for turn in reversed(history) if turn.role == "user"), False)


def held_to_grammar(chat: Chat, tools: Sequence[Any], tool_choice: Any) -> dict[str, Any]:
    """The embedded model's request fields for a session with tools (``tool_grammar``): the tools in
    Qwen2.5's format in the system message, and a grammar that keeps a call well formed. Greedy:
    at llama.cpp's default temperature one of three "What's the weather in Paris?" with a
    get_weather tool was answered with an invented forecast instead of the call (measured);
    greedy chose the call each time, and a plain question was still answered in words."""
    return {
        "messages": tool_grammar.system(chat, tools),
        "grammar": tool_grammar.grammar(tools, tool_choice),
        "temperature": 0,
    }


def _read_calls(calls: ToolText, event: Event) -> list[Event]:
    """``event`` through ``calls``: words held while they may be a call, the call before the end."""
    if isinstance(event, str):
        return [words] if (words := calls.feed(event)) else []
    if isinstance(event, Finish):
        words, call = calls.finish()
        return [*([words] if words else []), *([call] if call else []), event]
    return [event]


class Client:
    def __init__(self, settings: Settings) -> None:
        import httpx

        self.settings = settings
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        # Identity: a compressed stream could expand past every cap within one chunk.
        headers["Accept-Encoding"] = "identity"
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
        reasoning_effort: str | None = None,
    ) -> AsyncIterator[Event]:
        """Text deltas as the server sends them, then each tool call whole, then one ``Finish``.

        The endpoint is read by a task of its own, under the answer's deadlines (``_read``): the
        deadlines then never fire while this generator is suspended in its consumer's code. The
        reader is this generator's: ended, and awaited, however the generator ends.
        """
        if self.settings.is_assistant:
            chat = assistant_chat(chat, datetime.now().astimezone())
        body: dict[str, Any] = {"model": self.settings.model, "messages": chat, "stream": True}
        body["max_tokens"] = min(self.settings.max_tokens, max_tokens or self.settings.max_tokens)
        body["stream_options"] = {"include_usage": True}
        if reasoning_effort is not None:  # the session's ``reasoning.effort``, as chat completions names it
            body["reasoning_effort"] = reasoning_effort
        if self.settings.is_assistant and tool_grammar.applies(tools, tool_choice):
            body.update(held_to_grammar(chat, tools, tool_choice))
        elif tools:
            body["tools"] = list(tools)
            body["tool_choice"] = tool_choice
        events: asyncio.Queue[Event | None] = asyncio.Queue()  # bounded by the answer's caps
        owned = tasks.TaskSet()
        reader = owned.spawn(self._read(body, chat_stream.declared(tools), events))

        def ended(task: asyncio.Future[None]) -> None:
            if not task.cancelled():
                task.exception()  # retrieved here, raised below, even if no one reads to the end
            events.put_nowait(None)

        reader.add_done_callback(ended)
        # The embedded model may write a call as words: held while it may be one (``tool_text``).
        calls = ToolText(chat_stream.declared(tools)) if self.settings.is_assistant and tools else None
        try:
            while (event := await events.get()) is not None:
                for each in [event] if calls is None else _read_calls(calls, event):
                    yield each
            reader.result()  # re-raises the reader's error
        finally:
            await tasks.cancelled(reader)  # its HTTP stream closed before the answer's consumer goes on

    async def _read(self, body: dict[str, Any], tools: frozenset[str], events: asyncio.Queue[Any]) -> None:
        import httpx

        limits = self.settings.limits
        key = (self.settings.base_url, self.settings.model)
        # The embedded model is known not to think: its words are spoken as they come, never held.
        bare = False if self.settings.is_assistant else chat_stream.BARE_THINKERS.get(key)
        parser = chat_stream.Parser(limits, tools, body["max_tokens"], bare)
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            async with asyncio.timeout_at(started + min(limits.first_token_s, limits.answer_s)) as deadline:
                async with self._http.stream("POST", "chat/completions", json=body) as response:
                    await self._check_status(response)
                    async for line in chat_stream.lines(response.aiter_raw(), limits, body["max_tokens"]):
                        chunk = await chat_stream.decode(line)
                        if chat_stream.is_done(chunk):
                            break
                        for event in [] if chunk is None else parser.take(chunk):
                            events.put_nowait(event)
                        if parser.has_begun:
                            deadline.reschedule(started + limits.answer_s)
                for event in await parser.finish():
                    events.put_nowait(event)
                if (bare := parser.thinks_bare) is not None and not chat_stream.BARE_THINKERS.get(key):
                    chat_stream.BARE_THINKERS[key] = bare  # once seen thinking bare, always held
        except TimeoutError:
            if parser.has_begun:
                raise LLMTimeout(
                    f"the language model's answer took longer than {limits.answer_s:g} s"
                ) from None
            raise LLMTimeout(f"the language model said nothing within {limits.first_token_s:g} s") from None
        except httpx.TimeoutException as exc:
            raise LLMTimeout(f"the language model sent nothing for {self.settings.timeout_s:g} s") from exc
        except httpx.HTTPError as exc:
            raise LLMFailed(f"cannot reach the language model at {self._url()}: {exc!r}") from exc

    async def _check_status(self, response: Any) -> None:
        """An error status is an ``LLMFailed`` with the start of the body (never more of it)."""
        if response.status_code == 200:
            return
        detail = b""
        async for chunk in response.aiter_raw():
            detail += chunk[: 300 - len(detail)]
            if len(detail) >= 300:
                break
        text = detail.decode(errors="replace")
        raise LLMFailed(f"{self._url()} answered {response.status_code}: {text}")

    async def aclose(self) -> None:
        await self._http.aclose()

    def _url(self) -> str:
        return f"{self.settings.base_url.rstrip('/')}/chat/completions"
