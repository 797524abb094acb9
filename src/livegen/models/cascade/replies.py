"""Answers in the making: reply text cut into pieces, with the first piece's audio on its way.

An ``Answer`` is started either when a response is asked for, or earlier,
speculatively, at a pause in the user's speech (see ``stream``). Either way
it runs the same producer: the built-in responder (all pieces at once) or a
language model (pieces as its stream yields sentences), and it asks the
speech worker for the first piece's audio the moment that piece exists. The
stream that started it either reads it (once) or drops it; dropping cancels
the producer, which closes the model's HTTP stream, and the audio requests
still queued for the speech workers. The producer is a task of the stream's
(``spawn``), so the stream's close ends it whatever became of the answer;
a response that read it ends it before it ends (``aclose``).

``matches`` is how a prepared answer is checked against the response that
finally asks for it: same words heard, same voice, and for a language model
the same conversation, message for message, and the same tools.

A language model may answer with function calls besides (or instead of)
words: they are collected whole in ``calls``, with the endpoint's finish
reason and usage; ``made`` tells the stream when they are all in, so it can
report the calls while the words are still being spoken. The
built-in responder cannot call tools: when a session declares some and it has
no answer of its own, it says so (``NO_TOOLS``) rather than dropping them.

Everything here runs on the event loop, which is why it is bounded: the
responder reads at most ``responder.MAX_HEARD_CHARS`` of what was said, and
``sentences`` splits in linear time into pieces of bounded length, so no
client text costs more than a fraction of a millisecond here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from livegen import tasks
from livegen.models.cascade import chat_stream, llm, responder, sentences
from livegen.models.cascade.mcp import MAX_ROUNDS
from livegen.models.cascade.mcp_session import McpRun
from livegen.models.cascade.speech_jobs import Speech
from livegen.models.voice import Usage

logger = logging.getLogger("livegen.models.cascade")

Audio = concurrent.futures.Future[Speech]
#: A piece of the reply and its audio, if already asked for.
Piece = tuple[str, Audio | None]
Speak = Callable[[str, str], Audio]
#: Starts a task its owner (the session's stream) holds until it ends, and ends on close.
Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]
NO_TOOLS = (
    "I can't use this session's tools without a language model. "
    "Start livegen with --llm-base-url to let me call them."
)


#: The built-in responder's answer to a message with images: it has no eyes.
NO_IMAGES = (
    "I can't see images without a language model. "
    "Start livegen with --llm-base-url and a vision model to let me look at them."
)


@dataclass(frozen=True)
class Ask:
    """What a language model is asked: the conversation, the tools, the output limit."""

    chat: list[dict[str, Any]]
    tools: tuple[Any, ...] = ()
    tool_choice: Any = "auto"
    max_tokens: int | None = None
    #: ``reasoning.effort`` for a reasoning model (``reasoning_effort``); None: the endpoint's own.
    reasoning_effort: str | None = None


@dataclass
class Answer:
    #: What the user said; None when the user has not spoken yet (the assistant opens).
    user_text: str | None
    voice: str
    #: What the language model is asked, or None for the built-in responder.
    ask: Ask | None
    #: The model's function calls, whole; its finish reason ("length": cut at max tokens) and usage.
    calls: list[llm.ToolCall] = field(default_factory=list)
    finish_reason: str = "stop"
    usage: Usage | None = None
    #: The response's MCP calls (its tools are in ``ask.tools``), or None: it has no MCP servers.
    mcp: McpRun | None = None
    #: Whether the answer has words, and set once the first of them went out: its calls follow
    #: them, so that its message comes before them in the conversation (and the model's history).
    has_words: bool = False
    said: asyncio.Event = field(default_factory=asyncio.Event)
    _pieces: asyncio.Queue[Piece | None] = field(default_factory=asyncio.Queue)
    _producer: asyncio.Task[None] | None = None
    _audio: list[Audio] = field(default_factory=list)

    def matches(self, user_text: str | None, voice: str, ask: Ask | None) -> bool:
        return (self.user_text, self.voice, self.ask) == (user_text, voice, ask)

    async def pieces(self) -> AsyncIterator[Piece]:
        """The pieces in order, until the reply ends; read once. Re-raises the producer's error."""
        while (piece := await self._pieces.get()) is not None:
            yield piece
        if self._producer is not None and self._producer.done() and not self._producer.cancelled():
            self._producer.result()

    async def made(self) -> None:
        """Until the producer is done (all text, the calls and the finish are in), however it ended."""
        if self._producer is not None:
            await asyncio.wait({self._producer})

    def drop(self) -> None:
        """Stop making it and cancel the audio not yet taken."""
        if self._producer is not None:
            self._producer.cancel()
        for audio in self._audio:
            audio.cancel()

    async def aclose(self) -> None:
        """``drop`` it, and wait until its producer has ended (its HTTP stream closed)."""
        self.drop()
        if self._producer is not None:
            await tasks.cancelled(self._producer)


def start(
    spawn: Spawn,
    speak: Speak,
    client: llm.Client | None,
    user_text: str | None,
    voice: str,
    ask: Ask | None,
    has_tools: bool = False,
    max_words: int | None = None,
    has_images: bool = False,
    mcp_run: McpRun | None = None,
) -> Answer:
    """Start making the answer to ``user_text``, on a task ``spawn`` owns; read it with
    ``Answer.pieces``."""
    answer = Answer(user_text, voice, ask, mcp=mcp_run)
    now = datetime.now().astimezone()
    exact = _exact(client, user_text, has_images, has_tools, now)
    if client is None or ask is None or exact is not None:
        text = exact or (responder.OPENING if user_text is None else responder.reply(user_text, now))
        if has_tools and text == responder.FALLBACK:
            text = NO_TOOLS
        if has_images:  # whatever the words asked, they asked about what it cannot see
            text = NO_IMAGES
        if max_words is not None and len(text.split()) > max_words:  # the built-in "tokens" are words
            text = " ".join(text.split()[:max_words])
            answer.finish_reason = "length"
        answer._producer = spawn(_produce(answer, speak, _listed(sentences.split(text))))
    else:
        answer._producer = spawn(_produce(answer, speak, _from_llm(client, ask, answer)))
    return answer


def _exact(
    client: llm.Client | None, user_text: str | None, has_images: bool, has_tools: bool, now: datetime
) -> str | None:
    """The built-in responder's exact answer (time, date, sums) where the embedded assistant would
    be asked: it is instant, and a small model gets sums and the clock wrong."""
    if client is None or not client.settings.is_assistant or not user_text or has_images:
        return None
    return responder.exact(user_text, now, has_tools)


async def _produce(answer: Answer, speak: Speak, texts: AsyncIterator[str]) -> None:
    is_first = True
    try:
        async for text in texts:
            audio = speak(text, answer.voice) if is_first else None
            if audio is not None:
                answer._audio.append(audio)
            answer._pieces.put_nowait((text, audio))
            answer.has_words = True
            is_first = False
    finally:
        answer._pieces.put_nowait(None)


async def _from_llm(client: llm.Client, ask: Ask, answer: Answer) -> AsyncIterator[str]:
    """The model's words in pieces; its failure (``llm.LLMFailed``) is the answer's, raised on:
    the response then ends ``failed`` with the failure's code, never as a spoken apology that a
    client would take for an answer.

    Calls of MCP tools are the server's to make (``answer.mcp``): the words said before them are
    spoken first, then the calls are made and the model asked again with what they answered, up to
    ``mcp.MAX_ROUNDS`` times; function calls are the client's, and end the answer.
    """
    chat = list(ask.chat)
    num_words = 0
    for round_ in range(MAX_ROUNDS + 1):
        splitter, said, mcp_calls = sentences.Splitter(), list[str](), list[llm.ToolCall]()
        # An async generator (``llm.Client.stream``): closed, with its reader, when it fails here.
        stream = cast(
            AsyncGenerator[Any, None],
            client.stream(chat, ask.tools, ask.tool_choice, ask.max_tokens, ask.reasoning_effort),
        )
        async with contextlib.aclosing(stream):
            async for event in stream:
                if isinstance(event, llm.ToolCall):
                    is_mcp = answer.mcp is not None and answer.mcp.owns(event.name)
                    (mcp_calls if is_mcp else answer.calls).append(event)
                elif isinstance(event, llm.Finish):
                    answer.finish_reason, answer.usage = event.reason, _added(answer.usage, event.usage)
                else:
                    # A word takes a token at least: past ``max_tokens`` words the endpoint ignores
                    # the limit it was sent, and its answer fails before the excess is spoken.
                    num_words += len(event.split())
                    if ask.max_tokens is not None and num_words > ask.max_tokens:
                        raise chat_stream.LLMTooLarge(
                            f"the language model sent more than {ask.max_tokens} words, its max_tokens"
                        )
                    said.append(event)
                    for piece in splitter.feed(event):
                        yield piece
        for piece in splitter.flush():
            yield piece
        if not mcp_calls or answer.calls or answer.mcp is None or round_ == MAX_ROUNDS:
            return
        chat += await _called(answer.mcp, "".join(said), mcp_calls)


async def _called(run: McpRun, said: str, calls: list[llm.ToolCall]) -> list[dict[str, Any]]:
    """The model's calls and what each answered, as chat messages: made one after another."""
    ids = [call.call_id or f"call_{index}" for index, call in enumerate(calls)]
    made = [
        {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
        for call_id, call in zip(ids, calls, strict=True)
    ]
    messages: list[dict[str, Any]] = [{"role": "assistant", "content": said or None, "tool_calls": made}]
    for call_id, call in zip(ids, calls, strict=True):
        messages.append({"role": "tool", "tool_call_id": call_id, "content": await run.run(call)})
    return messages


def _added(total: Usage | None, more: Usage | None) -> Usage | None:
    """Usage of an answer made in rounds: every round's tokens count."""
    if total is None or more is None:
        return more or total
    return Usage(
        total.input_tokens + more.input_tokens,
        total.output_tokens + more.output_tokens,
        total.cached_tokens + more.cached_tokens,
    )


async def _listed(texts: list[str]) -> AsyncIterator[str]:
    for text in texts:
        yield text
