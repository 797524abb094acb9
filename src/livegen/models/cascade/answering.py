"""A cascade stream's answers: from a response request to its end, prepared early where it can be.

``stream.Stream`` hears the turns; this module owns what it answers with: the
language model's client, the answer prepared at the last pause
(``Answering.prepare``) and the committed turn no response has used yet, the
history the next answer will likely be asked with, the session's MCP tools and
the approvals their calls wait for. ``respond`` runs one response: it uses the
prepared answer when it still matches what is asked, else makes one
(``replies.start``), sends its function calls as soon as the model has made
them, and speaks it (``voicing.Voicing``: pieces in order, paced, a preamble
when the model is slow). The stream's outputs, tasks, speech workers and
barge-in gate are passed in, so this module never imports the stream.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

from livegen import tasks
from livegen.errors import ModelError
from livegen.models.cascade import barge_in, chat_stream, llm, mcp_session, preambles, replies
from livegen.models.cascade.replies import Answer
from livegen.models.cascade.voicing import Voicing
from livegen.models.voice import HistoryTurn, OutputKind, ResponseRequest, StreamConfig

logger = logging.getLogger("livegen.models.cascade")


class Counts(Protocol):
    """The model's counter this module moves (``model.Stats``)."""

    num_prepared_used: int


class Answering(Voicing):
    """The answers of one stream: prepared, asked for, made, called and spoken."""

    def __init__(
        self,
        config: StreamConfig,
        client: llm.Client | None,
        say: replies.Speak,
        gate: barge_in.Gate,
        emit: Callable[..., None],
        spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]],
        report_listing: Callable[[OutputKind, str, str], None],
        stats: Counts,
    ) -> None:
        self._config = config
        self._llm = client
        self._say = say
        self._gate = gate
        self._emit = emit
        self._spawn = spawn
        self._stats = stats
        #: The transcript of the last committed item no response has used yet, and its prepared answer.
        self._unanswered: asyncio.Task[str] | None = None
        self._unanswered_prepared: asyncio.Task[replies.Answer] | None = None
        #: The history the next response will likely be asked with (None: unknown, after an interruption);
        #: a language-model answer is prepared speculatively only against it.
        self._next_history: list[HistoryTurn] | None = []
        #: The session's MCP servers (listed as they are named) and the approvals its calls wait for.
        self.mcp = mcp_session.McpTools(spawn, report_listing)
        self.mcp.update(config.mcp_servers)
        self._approvals: dict[str, asyncio.Future[bool]] = {}

    @property
    def can_prepare(self) -> bool:
        """Whether an answer may be prepared at a pause: with no language model, or with the history
        the next response will be asked with."""
        return self._llm is None or self._next_history is not None

    def update(self, config: StreamConfig) -> None:
        self._config = config
        self.mcp.update(config.mcp_servers)

    def committed(self, transcript: asyncio.Task[str], prepared: asyncio.Task[replies.Answer] | None) -> None:
        """A turn was committed: the next response answers it (with ``prepared``, if it still fits)."""
        drop_prepared(self._unanswered_prepared)
        self._unanswered, self._unanswered_prepared = transcript, prepared

    def approve(self, approval_request_id: str, approve: bool) -> None:
        """The client's answer to an approval request of a response's MCP call."""
        answer = self._approvals.get(approval_request_id)
        if answer is not None and not answer.done():
            answer.set_result(approve)

    async def aclose(self) -> None:
        """The stream closed (its tasks already ended): drop what was prepared, close the client."""
        drop_prepared(self._unanswered_prepared)
        if self._llm:
            await self._llm.aclose()

    async def prepare(
        self, settled: list[asyncio.Task[str]], tail: asyncio.Task[str], voice: str
    ) -> replies.Answer:
        parts = [await asyncio.shield(task) for task in [*settled, tail]]
        user_text = " ".join(part for part in parts if part)
        config = self._config
        request = ResponseRequest(
            "",
            (),
            config.instructions,
            tools=config.tools,
            tool_choice=config.tool_choice,
            reasoning_effort=config.reasoning_effort,
        )
        ask = self._ask(self._next_history or [], user_text, request)
        return self._answer(user_text, voice, ask, bool(config.tools))

    def _answer(self, user_text: str | None, voice: str, ask: replies.Ask | None, *more: Any) -> Answer:
        """An answer in the making, on a task of the stream's (``replies.start``, ``more`` its
        ``has_tools``, ``max_words``, ``has_images``, ``mcp_run``)."""
        return replies.start(self._spawn, self._say, self._llm, user_text, voice, ask, *more)

    def _ask(
        self,
        history: Sequence[HistoryTurn],
        user_text: str,
        request: ResponseRequest,
        mcp_run: mcp_session.McpRun | None = None,
    ) -> replies.Ask | None:
        """What the language model is asked for ``request`` (None without one), cut to its window."""
        if self._llm is None:
            return None
        chat = llm.messages(history, user_text, request.instructions or self._config.instructions)
        tools = (*request.tools, *(mcp_run.chat_tools() if mcp_run else ()))
        chat = llm.fit(chat, tools, self._llm.settings, request.truncation)
        choice = request.tool_choice
        return replies.Ask(chat, tools, choice, request.max_output_tokens, request.reasoning_effort)

    async def respond(self, epoch: int, request: ResponseRequest) -> None:
        """Answer ``request``: the turn committed last (its prepared answer if it still fits), the
        language model or the built-in responder, the MCP and function calls, the words spoken."""
        rid = request.response_id
        unanswered, prepared = self._unanswered, self._unanswered_prepared
        self._unanswered = self._unanswered_prepared = None
        voice = request.voice or self._config.voice
        answer: replies.Answer | None = None
        try:
            user_text = await asyncio.shield(unanswered) if unanswered else _last_user_text(request.history)
            mcp_run = await self._mcp_run(epoch, request)
            ask = self._ask(request.history, user_text or "", request, mcp_run)
            has_images = ask is None and llm.has_images(request.history)
            if (request.max_output_tokens is not None or has_images) and ask is None:
                # Prepared without the limit (the built-in one cuts words) or without the images.
                drop_prepared(prepared)
                prepared = None
            answer = await self._use_prepared(prepared, user_text, voice, ask)
            if answer is None:
                has_tools = bool(request.tools) or not self.mcp.is_empty
                max_words = request.max_output_tokens
                answer = self._answer(user_text, voice, ask, has_tools, max_words, has_images, mcp_run)
            # The calls go out as soon as the model has made them, while its words are being spoken.
            calls = self._spawn(self._emit_calls(epoch, rid, answer))
            try:
                wants_audio = "audio" in request.modalities
                spoken = await self._speak(
                    epoch, rid, answer, wants_audio, voice, self._preamble_for(request)
                )
                await calls
            finally:
                await tasks.cancelled(calls)
        except asyncio.CancelledError:
            drop_prepared(prepared)
            self._next_history = None  # what the user heard of it is the core's to say
            raise
        except Exception as exc:
            if isinstance(exc, ModelError):  # a worker failed, not our code: one line, no traceback
                logger.warning("response %s failed: %s", rid, exc)
            else:
                logger.exception("response %s failed", rid)
            self._next_history = None
            code = exc.code if isinstance(exc, ModelError) else "model_error"
            text = str(exc) if isinstance(exc, llm.LLMFailed) else f"{code}: {exc}"
            self._emit(OutputKind.ERROR, epoch, response_id=rid, text=text, code=code)
            self._emit(OutputKind.RESPONSE_DONE, epoch, response_id=rid, status="failed")
            return
        finally:
            if answer is not None:
                await answer.aclose()
        self._finish(epoch, request, answer, user_text, spoken)

    def _preamble_for(self, request: ResponseRequest) -> str | None:
        """What to say if the language model is slow (None: no model, or the instructions say no)."""
        if self._llm is None:
            return None
        return preambles.preamble_for(request.instructions or self._config.instructions)

    async def _mcp_run(self, epoch: int, request: ResponseRequest) -> mcp_session.McpRun | None:
        """The MCP calls of ``request``'s response, with the tools listed (None: no servers, no
        language model to call them, or ``tool_choice`` none)."""
        if self.mcp.is_empty or self._llm is None or request.tool_choice == "none":
            return None
        taken = chat_stream.declared(request.tools)
        rid = request.response_id

        def emit(kind: OutputKind, **fields: Any) -> None:
            self._emit(kind, epoch, response_id=rid, **fields)

        return mcp_session.McpRun(await self.mcp.tools(taken), emit, self._approvals)

    async def _emit_calls(self, epoch: int, rid: str, answer: replies.Answer) -> None:
        await answer.made()
        if answer.has_words:  # its words' message first, however fast the calls came
            await answer.said.wait()
        for call in answer.calls:
            self._emit(
                OutputKind.FUNCTION_CALL,
                epoch,
                response_id=rid,
                text=call.arguments,
                call_id=call.call_id,
                name=call.name,
            )

    def _finish(
        self, epoch: int, request: ResponseRequest, answer: replies.Answer, user_text: str | None, spoken: str
    ) -> None:
        """The answer's end (``incomplete`` when cut at its token limit); what to prepare against next."""
        rid = request.response_id
        heard = llm.filled(request.history, user_text or "")
        # After calls the next response's history holds them and their outputs: nothing to prepare against.
        self._next_history = None if answer.calls else [*heard, HistoryTurn("assistant", spoken)]
        is_cut = answer.finish_reason == "length"
        status, code = ("incomplete", "max_output_tokens") if is_cut else ("completed", "")
        self._emit(
            OutputKind.RESPONSE_DONE, epoch, response_id=rid, status=status, code=code, usage=answer.usage
        )

    async def _use_prepared(
        self,
        task: asyncio.Task[replies.Answer] | None,
        user_text: str | None,
        voice: str,
        ask: replies.Ask | None,
    ) -> replies.Answer | None:
        if task is None:
            return None
        try:
            answer = await asyncio.shield(task)
        except Exception:
            logger.exception("preparing an answer failed; answering afresh")
            return None
        if not answer.matches(user_text, voice, ask):
            answer.drop()
            return None
        self._stats.num_prepared_used += 1
        return answer


def drop_prepared(task: asyncio.Task[replies.Answer] | None) -> None:
    """A prepared answer no response will use: cancelled, or dropped if it was made."""
    if task is None:
        return
    if not task.done():
        task.cancel()
    elif not task.cancelled() and task.exception() is None:
        task.result().drop()


def _last_user_text(history: Sequence[HistoryTurn]) -> str | None:
    """The last thing the user said; "" if it was not understood, None if the user has not spoken."""
    if not any(turn.role == "user" for turn in history):
        return None
    return next((t.text for t in reversed(history) if t.role == "user" and t.text), "")
