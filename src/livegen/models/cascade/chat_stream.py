"""One streamed chat completion, read within bounds: lines, JSON, deadlines, caps, checked calls.

The endpoint behind ``--llm-base-url`` is not trusted to behave. Measured on
the unbounded reader this replaces: one line with no newline grew the server
by a gigabyte in 20 s, endless tool-call fragments were joined by repeated
string concatenation on the event loop (another session waited 19.7 s), a
byte-a-second trickle never ended, and about 96 parallel calls or a call of
10 MB of arguments outran the client's outbox and closed its session. So
everything here is bounded by ``LLMLimits``, and each way past a bound is one
typed error (a ``ModelError`` whose ``code`` the wire table lists), which
fails that response and nothing else:

- ``LLMTimeout``: no first words or call within ``first_token_s``, or no end
  within ``answer_s`` (both counted from the request, headers included);
- ``LLMTooLarge``: a line past ``max_line_bytes``, words past ``max_text_bytes``,
  arguments past ``max_arguments_bytes``, more calls than ``max_calls``, more
  chunks or lines than the ``max_tokens`` asked for allow (``CHUNKS_PER_TOKEN``,
  ``LINES_PER_CHUNK``: endless fragments or keep-alives), or a raw stream past
  ``STREAM_OVERHEAD`` times the caps (long lines of junk);
- ``LLMInvalidCall``: a call of a function the request did not declare, or
  arguments that are not a JSON object;
- ``LLMMalformed``: a ``data:`` line that is not a chat-completion chunk;
- ``LLMFailed``: an error status, a refused or broken connection.

A reasoning model's thinking is not the answer: a ``reasoning_content`` (or
``reasoning``) delta, as vLLM's reasoning parsers and DeepSeek send it, is
never read as text, and ``<think>…</think>`` inline in ``content`` (a model
served without a reasoning parser) is cut out by ``ThinkFilter``, even when a
tag is split across chunks. Neither reaches speech, the transcript or the
history; thinking still counts as the endpoint having begun (it is answering).

Lines are split from raw bytes as they come (linear, never re-scanned), a
line's JSON is decoded on a thread when it is large, and the reader yields
to the event loop after every chunk and every ``YIELD_EVERY_LINES`` lines, so
a fast endpoint cannot hold the loop.
A call id that is not a plain token (control characters, 10,000 characters)
is dropped, and the session gives the call an id of its own.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from livegen.errors import ModelError
from livegen.models.voice import LLMLimits, Usage

#: A line's JSON larger than this is decoded on a thread (a megabyte costs milliseconds).
INLINE_JSON_BYTES = 64 * 1024
#: The raw stream may be this many times the answer's caps: each token comes wrapped in about
#: 200 bytes of JSON, so a legitimate answer at its caps stays under it.
STREAM_OVERHEAD = 64
#: The reader lets other tasks run after this many lines (and after every chunk read).
YIELD_EVERY_LINES = 32
#: An answer of ``max_tokens`` tokens comes in at most this many chunks per token, plus
#: ``SPARE_CHUNKS`` (the role, the finish, the usage): endpoints send one chunk a token.
CHUNKS_PER_TOKEN = 4
SPARE_CHUNKS = 256
#: A chunk is a ``data:`` line and a blank one; the third is room for comments (keep-alives).
LINES_PER_CHUNK = 3
#: A call id the session passes on; any other is replaced by one of the session's own.
_CALL_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_DONE = object()


class LLMFailed(ModelError):
    """The endpoint answered an error status, could not be reached, or broke the connection."""

    code = "llm_failed"


class LLMMalformed(LLMFailed):
    code = "llm_malformed_stream"


class LLMTimeout(LLMFailed):
    code = "llm_timeout"


class LLMTooLarge(LLMFailed):
    code = "llm_output_too_large"


class LLMInvalidCall(LLMFailed):
    code = "llm_invalid_tool_call"


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


def declared(tools: Sequence[Any]) -> frozenset[str]:
    """The function names of chat-shaped ``tools``: the only calls an answer may make."""
    names = set()
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.add(function["name"])
    return frozenset(names)


def stream_cap(limits: LLMLimits) -> int:
    """The most raw bytes one answer's stream may take."""
    return STREAM_OVERHEAD * (limits.max_text_bytes + limits.max_arguments_bytes) + limits.max_line_bytes


def max_chunks(max_tokens: int) -> int:
    """The most chunks an answer of ``max_tokens`` tokens may come in."""
    return CHUNKS_PER_TOKEN * max_tokens + SPARE_CHUNKS


async def lines(chunks: AsyncIterator[bytes], limits: LLMLimits, max_tokens: int) -> AsyncIterator[bytes]:
    """The lines of a byte stream (``\\n`` or ``\\r\\n``), each within ``max_line_bytes``; at most
    ``LINES_PER_CHUNK`` per chunk the answer may have (keep-alive comments included)."""
    pending = bytearray()
    total, cap, count = 0, stream_cap(limits), 0
    max_lines = LINES_PER_CHUNK * max_chunks(max_tokens)
    async for chunk in chunks:
        total += len(chunk)
        if total > cap:
            raise LLMTooLarge(f"the language model's stream passed {cap} bytes")
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            pending += chunk[start:end]
            _check_line(len(pending), limits)
            yield bytes(pending).rstrip(b"\r")
            pending.clear()
            start = end + 1
            count += 1
            if count > max_lines:
                raise LLMTooLarge(f"the language model sent more than {max_lines} lines in one answer")
            if count % YIELD_EVERY_LINES == 0:
                await asyncio.sleep(0)
        pending += chunk[start:]
        _check_line(len(pending), limits)
        await asyncio.sleep(0)  # a fast endpoint must not hold the event loop between chunks
    if pending:
        yield bytes(pending).rstrip(b"\r")


def _check_line(size: int, limits: LLMLimits) -> None:
    if size > limits.max_line_bytes:
        raise LLMTooLarge(f"the language model sent a line longer than {limits.max_line_bytes} bytes")


async def decode(line: bytes) -> Any:
    """A ``data:`` line's JSON; ``DONE`` at ``[DONE]``; None for any other line (comments, ids)."""
    if not line.startswith(b"data:"):
        return None
    data = line[len(b"data:") :].strip()
    if data == b"[DONE]":
        return _DONE
    try:
        if len(data) > INLINE_JSON_BYTES:
            return await asyncio.to_thread(json.loads, data)
        return json.loads(data)
    except ValueError:
        raise LLMMalformed(f"the language model sent a malformed event: {data[:200]!r}") from None


def is_done(chunk: Any) -> bool:
    return chunk is _DONE


#: The tags a reasoning model wraps its thinking in when no reasoning parser strips them.
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


class ThinkFilter:
    """``content`` deltas with ``<think>…</think>`` spans removed, tags split across deltas included.

    Text that may be the start of a tag is held back until the next delta says; ``flush`` gives
    it back at the end (unless it was inside an unclosed span: thinking cut off is still thinking).

    A model whose chat template opens the span in the prompt (Qwen3, DeepSeek-R1 served without
    a reasoning parser) sends a bare ``</think>``: everything before it was thinking. Unless the
    endpoint is known not to (``bare`` False), the text before any tag is held until a tag says
    which it was: a bare ``</think>`` drops it, a ``<think>`` (or an answer that ends with no tag)
    releases it. ``bare`` True: the endpoint is known to think so, and an answer cut off before its
    ``</think>`` was all thinking; None: unknown, and such a cut answer is dropped too (the safe side).
    """

    def __init__(self, bare: bool | None = False) -> None:
        self._inside = False
        self._held = ""
        #: After a closing tag, the blank lines a model puts before its answer are not the answer.
        self._trim = False
        self._bare = bare
        #: The text before any tag, while it may still be thinking (None: a tag said, or no hold),
        #: in pieces (joined once: never quadratic), and its last characters (a tag split across
        #: pieces is found in them and the next piece).
        self._before: list[str] | None = None if bare is False else []
        self._tail = ""
        #: What the answer showed: a bare ``</think>`` (True), a ``<think>`` or none (False).
        self.saw_bare_close = False
        self.saw_tag = False

    def feed(self, text: str) -> str:
        if self._before is None:
            return self._feed(text)
        window = self._tail + text
        close, opening = window.find(THINK_CLOSE), window.find(THINK_OPEN)
        if close != -1 and (opening == -1 or close < opening):  # bare: all before it was thinking
            self._before = None
            self.saw_bare_close = self.saw_tag = self._trim = True
            return self._feed(window[close + len(THINK_CLOSE) :])
        if opening != -1:
            held, self._before = "".join(self._before) + text, None
            return self._feed(held)
        self._before.append(text)
        self._tail = window[-(len(THINK_CLOSE) - 1) :]
        return ""

    def released(self) -> str:
        """The endpoint turned out to keep its thinking apart (``reasoning_content``): the held
        text is the answer."""
        held, self._before = self._before, None
        return self._feed("".join(held)) if held else ""

    def _feed(self, text: str) -> str:
        buffer, out = self._held + text, []
        self._held = ""
        while buffer:
            if self._trim and not self._inside:  # the blank lines after a closing tag
                buffer = buffer.lstrip()
                self._trim = not buffer
                if not buffer:
                    break
            tag = THINK_CLOSE if self._inside else THINK_OPEN
            at = buffer.find(tag)
            if at == -1:
                keep = _partial_tag(buffer, tag)
                if not self._inside:
                    out.append(buffer[: len(buffer) - keep])
                self._held = buffer[len(buffer) - keep :]
                break
            if not self._inside:
                out.append(buffer[:at])
            self.saw_tag = True
            buffer = buffer[at + len(tag) :]
            self._inside = not self._inside
            self._trim = self._trim or not self._inside
        return "".join(out)

    def flush(self, is_cut: bool = False) -> str:
        """What is still held, at the answer's end (``is_cut``: at its token limit)."""
        if self._before is not None:
            before, self._before = "".join(self._before), None
            if self._bare is True or is_cut:  # cut off before its ``</think>``: maybe all thinking
                return ""
            return self._trimmed(before)
        held, self._held = self._held, ""
        return "" if self._inside else self._trimmed(held)

    def _trimmed(self, text: str) -> str:
        if self._trim and text:
            text = text.lstrip()
            self._trim = not text
        return text


#: What each endpoint (base URL and model) showed of its thinking: True, it thinks with a bare
#: ``</think>``; False, it answered without one. Bounded by the endpoints a server is given.
BARE_THINKERS: dict[tuple[str, str], bool] = {}


def _partial_tag(text: str, tag: str) -> int:
    """How many characters at the end of ``text`` could begin ``tag``."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0


@dataclass
class _Call:
    call_id: str = ""
    name: str = ""
    pieces: list[str] = field(default_factory=list)


class Parser:
    """Chunks of one streamed chat completion -> text, whole tool calls, the finish; within caps."""

    def __init__(
        self, limits: LLMLimits, tools: frozenset[str], max_tokens: int, bare: bool | None = False
    ) -> None:
        self._limits = limits
        self._tools = tools
        #: Chunks are counted against the tokens asked for: endless fragments end at once.
        self._max_chunks = max_chunks(max_tokens)
        self._num_chunks = 0
        #: index -> the call so far, in the order the calls began.
        self._calls: dict[int, _Call] = {}
        self._text_bytes = 0
        self._arguments_bytes = 0
        self._reason = ""
        self._usage: Usage | None = None
        self._thinking = ThinkFilter(bare)
        #: Whether any words or call fragment came yet (the first-token deadline is met).
        self.has_begun = False

    def take(self, chunk: Any) -> list[Event]:
        """The text in one chunk (tool-call fragments are kept)."""
        self._num_chunks += 1
        if self._num_chunks > self._max_chunks:
            raise LLMTooLarge(f"the language model sent more than {self._max_chunks} chunks in one answer")
        try:
            choice = chunk["choices"][0] if chunk.get("choices") else {}
            delta = choice.get("delta") or {}
            self._take_usage(chunk.get("usage"))
            for fragment in delta.get("tool_calls") or ():
                self._take_call(fragment)
            reason = choice.get("finish_reason")
            content = delta.get("content")
            thought = delta.get("reasoning_content") or delta.get("reasoning")
        except (ValueError, AttributeError, KeyError, IndexError, TypeError):
            raise LLMMalformed(f"the language model sent a malformed event: {str(chunk)[:200]!r}") from None
        if reason:
            self._reason = str(reason)[:64]
        said = []
        if thought:  # thinking: the endpoint is answering, but none of it is the answer
            self.has_begun = True
            said.append(self._thinking.released())  # it keeps its thinking apart: no bare tag
        if not isinstance(content, str) or not content:
            return [text for text in said if text]
        self._text_bytes += len(content.encode())
        if self._text_bytes > self._limits.max_text_bytes:
            raise LLMTooLarge(
                f"the language model's answer passed {self._limits.max_text_bytes} bytes of text"
            )
        self.has_begun = True
        said.append(self._thinking.feed(content))
        return [text for text in said if text]

    def _take_call(self, fragment: dict[str, Any]) -> None:
        index = int(fragment.get("index", len(self._calls)))
        call = self._calls.get(index)
        if call is None:
            if len(self._calls) >= self._limits.max_calls:
                raise LLMTooLarge(f"the language model made more than {self._limits.max_calls} calls")
            call = self._calls[index] = _Call()
        self.has_begun = True
        function = fragment.get("function") or {}
        call.call_id = call.call_id or str(fragment.get("id") or "")[:1000]
        if not call.name and (name := function.get("name")):
            call.name = str(name)
            if call.name not in self._tools:
                detail = f"the language model called {call.name[:64]!r}, which is not among the tools"
                raise LLMInvalidCall(detail)
        arguments = function.get("arguments")
        # Ollama (and some servers) send arguments as an object rather than JSON text.
        piece = arguments if isinstance(arguments, str) else json.dumps(arguments) if arguments else ""
        self._arguments_bytes += len(piece.encode())
        if self._arguments_bytes > self._limits.max_arguments_bytes:
            limit = self._limits.max_arguments_bytes
            raise LLMTooLarge(f"the language model's calls passed {limit} bytes of arguments")
        call.pieces.append(piece)  # joined once, at the end: never quadratic

    def _take_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        details = usage.get("prompt_tokens_details") or {}
        self._usage = Usage(
            int(usage.get("prompt_tokens") or 0),
            int(usage.get("completion_tokens") or 0),
            int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0,
        )

    async def finish(self) -> list[Event]:
        """Each call whole and checked, then the finish."""
        calls: list[Event] = []
        for call in self._calls.values():
            if not call.name:
                continue
            arguments = "".join(call.pieces) or "{}"
            await _check_arguments(call.name, arguments)
            call_id = call.call_id if _CALL_ID.fullmatch(call.call_id) else ""
            calls.append(ToolCall(call_id, call.name, arguments))
        held = self._thinking.flush(is_cut=self._reason == "length")
        return [*([held] if held else []), *calls, Finish(self._reason or "stop", self._usage)]

    @property
    def thinks_bare(self) -> bool | None:
        """What this answer showed of the endpoint's thinking (None: nothing either way)."""
        if self._thinking.saw_bare_close:
            return True
        return False if self._thinking.saw_tag or self._text_bytes else None


async def _check_arguments(name: str, arguments: str) -> None:
    try:
        if len(arguments) > INLINE_JSON_BYTES:
            value = await asyncio.to_thread(json.loads, arguments)
        else:
            value = json.loads(arguments)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise LLMInvalidCall(f"the arguments of the language model's call of {name!r} are not a JSON object")
