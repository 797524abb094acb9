"""One session's cascade: input audio -> Silero turns -> Whisper -> a reply -> Piper, as outputs.

``Stream`` is the ``VoiceStream`` of the cascade. It owns the session's
uncommitted input audio (16 kHz PCM16, positions counted in samples since the
session started), its Silero state, the transcripts in flight and the
responses being spoken. The shared parts (Whisper, the speech workers) belong
to ``model.CascadeModel``; the epoch fence and the conversation belong to the
session core, which is why every output carries the epoch of the call it
answers and why a cancelled response simply stops, without a terminal output.

Latency comes from doing the work before the turn ends. At a short pause
(``vad.Event.PAUSE``, a fifth of the silence window) the stream
transcribes what it has and prepares the answer, including the audio of its
first sentence. If the user goes on, the answer is dropped, and the partial
transcript is kept when it covers enough speech (``SETTLE_S``), so a long
turn is transcribed piece by piece while it is spoken. When the turn is
committed with no speech after the pause, the transcript and the first audio
are already there.

When the session asks for input transcription, the turn is also decoded
while it is spoken, for live captions (``transcripts``, ``captions``): stable
words go out as transcript deltas with no item id, which the session core
gives to the item the turn will become.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from livegen import tasks
from livegen.errors import CapacityExceeded, InvalidRequest, InvalidState, ModelError
from livegen.models.cascade import (
    asr,
    barge_in,
    captions,
    chat_stream,
    denoise,
    endpoint,
    incomplete,
    llm,
    mcp_session,
    preambles,
    replies,
    transcripts,
    vad,
)
from livegen.models.cascade.asr_batch import Priority
from livegen.models.cascade.replies import Answer
from livegen.models.cascade.voicing import Voicing
from livegen.models.voice import (
    HistoryTurn,
    OutputKind,
    ResponseRequest,
    StreamConfig,
    TurnDetection,
    Usage,
    VoiceOutput,
)

if TYPE_CHECKING:
    from livegen.models.cascade.model import CascadeModel

logger = logging.getLogger("livegen.models.cascade")

T = TypeVar("T")

SAMPLE_RATE = vad.SAMPLE_RATE
#: A partial transcript taken at a pause is kept if the user goes on and it covers this much audio.
SETTLE_S = 2.0
#: Audio kept after the last speech frame when transcribing, so a trailing consonant is not cut.
_TAIL_S = 0.25
#: Uncommitted audio beyond this is refused: commit or clear the buffer.
MAX_BUFFER_S = 300
#: Appends up to this long (100 ms) run the detector inline; longer ones on a thread.
_INLINE_FEED_BYTES = SAMPLE_RATE // 10 * 2


@dataclass
class Speculation:
    """Work started at a pause, on the input from ``start`` to ``end`` (samples)."""

    start: int
    end: int
    transcript: asyncio.Task[str]
    prepared: asyncio.Task[replies.Answer] | None


class Stream(Voicing):
    def __init__(self, model: CascadeModel, session_id: str, config: StreamConfig) -> None:
        self._model = model
        self.session_id = session_id
        self._config = config
        self._outputs: asyncio.Queue[VoiceOutput | None] = asyncio.Queue()
        has_endpoint = model.endpointer is not None
        detection = config.turn_detection or TurnDetection()
        self._detector = vad.Detector(model.vad_path, detection, has_endpoint, model.settings.vad)
        #: semantic_vad: whether the detector is being fed on a thread, a "complete" verdict that
        #: came meanwhile (its pause's last speech sample), and the epoch of the latest append.
        self._is_feeding = False
        self._verdict: int | None = None
        self._epoch = 0
        self._llm = llm.Client(model.llm) if model.llm else None
        #: Speech for this session: the workers are shared fairly between sessions.
        self._say: replies.Speak = functools.partial(model.speak, owner=session_id)
        # The uncommitted input: samples [_buffer_start, _buffer_start + len(_buffer) / 2).
        self._buffer = bytearray()
        self._buffer_start = 0
        #: Whether the buffer holds speech (so a commit has something to transcribe).
        self._has_speech = False
        #: Transcripts of the settled parts of the current turn, in order, and where they end.
        self._settled: list[asyncio.Task[str]] = []
        self._settled_until = 0
        self._speculation: Speculation | None = None
        #: The transcript of the last committed item no response has used yet, and its prepared answer.
        self._unanswered: asyncio.Task[str] | None = None
        self._unanswered_prepared: asyncio.Task[replies.Answer] | None = None
        #: The history the next response will likely be asked with (None: unknown, after an interruption);
        #: a language-model answer is prepared speculatively only against it.
        self._next_history: list[HistoryTurn] | None = []
        self._responses: dict[str, tuple[int, asyncio.Task[None]]] = {}
        #: Every task the stream starts, its responses' too: ``aclose`` cancels and awaits them.
        self._tasks = tasks.TaskSet()
        self._is_closed = False
        #: Live captions of the turn being spoken, and the completed transcripts.
        self._transcripts = transcripts.Transcripts(self._transcribe, self._score, self._spawn, self._emit)
        #: The session's noise reduction (None: off) and its check of speech over an answer.
        self._denoiser = denoise.for_session(None, config.noise_reduction)
        self._gate = barge_in.Gate(self._transcribe, self._score, self._spawn)
        self._gate.is_on = barge_in.is_wanted(config)
        #: The session's MCP servers (listed as they are named) and the approvals its calls wait for.
        self._mcp = mcp_session.McpTools(self._spawn, self._report_listing)
        self._mcp.update(config.mcp_servers)
        self._approvals: dict[str, asyncio.Future[bool]] = {}

    # -- the VoiceStream calls -------------------------------------------------------------------

    async def append(self, epoch: int, pcm: bytes) -> None:
        self._check_open()
        if len(pcm) % 2:
            raise InvalidRequest(f"input audio must be whole PCM16 samples; got {len(pcm)} bytes")
        if (len(self._buffer) + len(pcm)) // 2 > MAX_BUFFER_S * SAMPLE_RATE:
            raise CapacityExceeded(
                f"more than {MAX_BUFFER_S} s of uncommitted audio; commit or clear the input buffer"
            )
        if self._denoiser is not None:  # about 5 ms per 100 ms of audio: never on the event loop
            pcm = await asyncio.to_thread(self._denoiser.process, pcm)
        self._buffer += pcm
        for turn in self._gate.hold(self._detector.turns, asyncio.get_running_loop().time()):
            self._on_turn(epoch, turn)  # held speech over the answer was words: it barges in
        # Silero costs about 1 ms per 32 ms frame: a long append is fed on a thread so the event
        # loop (every other session) never waits for it; the chain awaits appends one at a time,
        # so nothing else touches the detector meanwhile.
        feed = self._detector.feed
        self._epoch, self._is_feeding = epoch, True
        try:
            turns = feed(pcm) if len(pcm) <= _INLINE_FEED_BYTES else await asyncio.to_thread(feed, pcm)
        finally:
            self._is_feeding = False
        if self._verdict is not None:
            turns += self._detector.turns.complete(self._verdict)
            self._verdict = None
        for turn in turns:
            self._on_turn(epoch, turn)
        self._gate.step(self._detector.turns, lambda start: self._audio(start, self._buffer_end()))
        self._drop_leading_silence()
        self._live_caption(epoch)

    async def commit(self, epoch: int, item_id: str) -> None:
        self._check_open()
        tail, prepared = self._take_turn()
        caption = self._transcripts.of_turn(self._buffer_end(), self._audio)
        # With ``include`` logprobs: the turn's audio, to score the transcript's tokens against.
        wants_logprobs = self._config.transcription_logprobs
        heard = self._audio(self._buffer_start, self._buffer_end()) if wants_logprobs else None
        parts = [*self._settled, tail]
        task = self._spawn(self._transcripts.complete(epoch, item_id, parts, caption, heard))
        self._drop_prepared(self._unanswered_prepared)
        self._unanswered, self._unanswered_prepared = task, prepared
        self._reset_buffer()

    async def clear(self, epoch: int) -> None:
        self._check_open()
        self._drop_speculation(keep_transcript=False)
        for task in self._settled:
            task.cancel()
        self._detector.turns.reset()
        self._reset_buffer()

    async def respond(self, epoch: int, request: ResponseRequest) -> None:
        self._check_open()
        if request.response_id in self._responses:
            raise InvalidState(f"response {request.response_id!r} is already running")
        task = self._spawn(self._respond(epoch, request))
        self._responses[request.response_id] = (epoch, task)
        task.add_done_callback(lambda _: self._responses.pop(request.response_id, None))

    async def cancel(self, epoch: int) -> None:
        for response_epoch, task in list(self._responses.values()):
            if response_epoch < epoch:
                task.cancel()
                self._gate.playing_until = 0.0  # interrupted: what was sent is no longer playing

    async def update(self, config: StreamConfig) -> None:
        self._config = config
        self._detector.turns.settings = config.turn_detection or TurnDetection()
        self._denoiser = denoise.for_session(self._denoiser, config.noise_reduction)
        self._gate.is_on = barge_in.is_wanted(config)
        self._mcp.update(config.mcp_servers)

    async def approve(self, epoch: int, approval_request_id: str, approve: bool) -> None:
        """The client's answer to an approval request of a response's MCP call."""
        answer = self._approvals.get(approval_request_id)
        if answer is not None and not answer.done():
            answer.set_result(approve)

    def _report_listing(self, kind: OutputKind, item_id: str, text: str) -> None:
        self._emit(kind, self._epoch, item_id=item_id, text=text)

    async def outputs(self) -> AsyncIterator[VoiceOutput]:
        while (output := await self._outputs.get()) is not None:
            yield output

    async def aclose(self) -> None:
        if self._is_closed:
            return
        self._is_closed = True
        await self._tasks.aclose()
        self._drop_prepared(self._unanswered_prepared)
        self._drop_speculation(keep_transcript=False)
        if self._llm:
            await self._llm.aclose()
        self._outputs.put_nowait(None)

    # -- turns -----------------------------------------------------------------------------------

    def _on_turn(self, epoch: int, turn: vad.Turn) -> None:
        is_server_vad = self._config.turn_detection is not None
        if turn.event is vad.Event.SPEECH_STARTED:
            self._on_speech_started(turn.sample)
            if is_server_vad:
                self._emit(OutputKind.SPEECH_STARTED, epoch, audio_ms=_ms(turn.sample))
        elif turn.event is vad.Event.PAUSE:
            self._speculate()
        elif turn.event is vad.Event.RESUMED:
            self._drop_speculation(keep_transcript=True)
        elif turn.event is vad.Event.CHECK:
            self._spawn(self._check_end(turn.start, turn.sample))
        else:
            self._transcripts.stop()
            if is_server_vad:
                self._emit(OutputKind.SPEECH_STOPPED, epoch, audio_ms=_ms(turn.sample))

    async def _check_end(self, start: int, sample: int) -> None:
        """semantic_vad at a pause: end the turn if the model hears it complete, the words heard so
        far can end a request (``incomplete``) and the user is still silent; else the turns wait
        on, at most the eagerness's maximum wait. Waiting for the words costs the answer nothing:
        it is prepared from the same transcript."""
        endpointer = self._model.endpointer
        if endpointer is None:
            return
        audio = self._audio(max(start, sample - endpoint.WINDOW_S * SAMPLE_RATE), sample)
        try:
            probability = await endpointer.probability(audio)
        except Exception:
            logger.exception("the end-of-turn model failed; the turn ends at the maximum wait")
            return
        if probability < vad.COMPLETE_AT.get(self._detector.turns.settings.eagerness or "", 0.5):
            return
        if incomplete.holds(await self._heard_at(sample)):  # "book a table for": the words go on
            return
        if self._is_feeding:  # the detector is on a thread: the append applies the verdict after it
            self._verdict = sample
            return
        for turn in self._detector.turns.complete(sample):
            self._on_turn(self._epoch, turn)

    async def _heard_at(self, sample: int) -> str | None:
        """The turn's words up to the pause at ``sample``, from the transcript started at it
        (``_speculate``); None when there is none (not speculative) or it failed."""
        speculation = self._speculation
        if speculation is None or speculation.end < sample:
            return None
        parts = [*self._settled, speculation.transcript]
        await asyncio.wait(parts)  # a dropped speculation is cancelled: the verdict is stale then
        if any(part.cancelled() or part.exception() is not None for part in parts):
            return None
        return " ".join(part.result() for part in parts)

    def _on_speech_started(self, sample: int) -> None:
        start = max(sample, self._buffer_start)
        if self._speculation is not None:  # a new segment before the commit: the user went on
            self._drop_speculation(keep_transcript=True)
        elif not self._has_speech:
            self._settled_until = start
            self._transcripts.turn_start = start
        self._has_speech = True

    def _speculate(self) -> None:
        self._drop_speculation(keep_transcript=False)
        if not self._model.is_speculative or not self._mcp.is_empty:
            return  # (a speculative answer must never call an MCP tool: the call may act)
        start, end = self._settled_until, self._buffer_end()
        transcript = self._spawn(self._transcribe(self._audio(start, end)))
        prepared = None
        if self._llm is None or self._next_history is not None:
            prepared = self._spawn(self._prepare(list(self._settled), transcript, self._config.voice))
            # A transcript that failed fails this too; the response that waits on the transcript
            # reports it (asr_unavailable), so it is not logged again as never retrieved.
            prepared.add_done_callback(_retrieved)
        self._speculation = Speculation(start, end, transcript, prepared)
        self._model.stats.num_speculations += 1

    def _drop_speculation(self, keep_transcript: bool) -> None:
        speculation, self._speculation = self._speculation, None
        if speculation is None:
            return
        self._drop_prepared(speculation.prepared)
        if keep_transcript and speculation.end - speculation.start >= SETTLE_S * SAMPLE_RATE:
            self._settled.append(speculation.transcript)
            self._settled_until = speculation.end
            self._model.stats.num_settled += 1
        else:
            speculation.transcript.cancel()

    def _take_turn(self) -> tuple[asyncio.Task[str], asyncio.Task[replies.Answer] | None]:
        """The transcript of the unsettled rest of the turn, and an answer if one was prepared."""
        speculation = self._speculation
        last_speech = self._detector.turns.last_speech
        if (
            speculation is not None
            and speculation.start == self._settled_until
            and last_speech <= speculation.end
        ):
            self._speculation = None
            self._model.stats.num_speculation_hits += 1
            return speculation.transcript, speculation.prepared
        self._drop_speculation(keep_transcript=False)
        if not self._has_speech:
            return self._spawn(_constant("")), None
        end = min(self._buffer_end(), last_speech + int(_TAIL_S * SAMPLE_RATE))
        return self._spawn(self._transcribe(self._audio(self._settled_until, end))), None

    def _reset_buffer(self) -> None:
        self._buffer_start = self._buffer_end()
        self._buffer.clear()
        self._settled = []
        self._settled_until = self._buffer_start
        self._transcripts.new_turn(self._buffer_start)
        # A commit in the middle of speech: the rest of it belongs to the next item.
        self._has_speech = self._detector.turns.is_speaking

    def _drop_leading_silence(self) -> None:
        """Between turns, keep only the prefix padding: silence is never transcribed."""
        if self._has_speech or self._speculation is not None or self._detector.turns.held is not None:
            return
        keep = (self._detector.turns.settings.prefix_padding_ms * SAMPLE_RATE // 1000 + vad.FRAME_SAMPLES) * 2
        if len(self._buffer) > 2 * keep:
            excess = len(self._buffer) - keep
            del self._buffer[:excess]
            self._buffer_start += excess // 2
            self._settled_until = self._buffer_start

    def _buffer_end(self) -> int:
        return self._buffer_start + len(self._buffer) // 2

    def _audio(self, start: int, end: int) -> np.ndarray:
        begin = max(0, start - self._buffer_start) * 2
        stop = max(0, end - self._buffer_start) * 2
        return np.frombuffer(bytes(self._buffer[begin:stop]), "<i2").astype(np.float32) / 32768.0

    # -- transcripts -----------------------------------------------------------------------------

    async def _transcribe(
        self, audio: np.ndarray, prefix: str = "", priority: Priority = Priority.FINAL
    ) -> str:
        return await self._model.transcribe(audio, self._asr_options(prefix), priority)

    async def _score(self, audio: np.ndarray, text: str) -> list[asr.Logprob]:
        return await self._model.logprobs(audio, text, self._asr_options())

    def _asr_options(self, prefix: str = "") -> asr.Options:
        config = self._config
        return asr.Options(
            config.transcription_model, config.transcription_language, config.transcription_prompt, prefix
        )

    def _live_caption(self, epoch: int) -> None:
        """Live captions while the user speaks, when the session transcribes with server VAD."""
        if not self._config.transcription_model or self._config.turn_detection is None:
            return
        if self._detector.turns.is_speaking and self._speculation is None:
            step_s = captions.DELAY_STEP_S.get(self._config.transcription_delay, captions.STEP_S)
            self._transcripts.caption(epoch, self._buffer_end(), self._audio, step_s)

    # -- responses -------------------------------------------------------------------------------

    async def _prepare(
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

    async def _respond(self, epoch: int, request: ResponseRequest) -> None:
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
                self._drop_prepared(prepared)
                prepared = None
            answer = await self._use_prepared(prepared, user_text, voice, ask)
            if answer is None:
                has_tools = bool(request.tools) or not self._mcp.is_empty
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
            self._drop_prepared(prepared)
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
        if self._mcp.is_empty or self._llm is None or request.tool_choice == "none":
            return None
        taken = chat_stream.declared(request.tools)
        rid = request.response_id

        def emit(kind: OutputKind, **fields: Any) -> None:
            self._emit(kind, epoch, response_id=rid, **fields)

        return mcp_session.McpRun(await self._mcp.tools(taken), emit, self._approvals)

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
        self._model.stats.num_prepared_used += 1
        return answer

    # -- plumbing --------------------------------------------------------------------------------

    def _emit(
        self,
        kind: OutputKind,
        epoch: int,
        *,
        response_id: str | None = None,
        item_id: str | None = None,
        text: str = "",
        audio: bytes = b"",
        audio_ms: int = 0,
        status: str = "",
        code: str = "",
        call_id: str = "",
        name: str = "",
        usage: Usage | None = None,
        logprobs: tuple[Mapping[str, Any], ...] | None = None,
        server_label: str = "",
        approval_request_id: str = "",
    ) -> None:
        if not self._is_closed:
            fields = (kind, epoch, response_id, item_id, text, audio, audio_ms, status, code, call_id, name)
            output = VoiceOutput(*fields, usage, logprobs, server_label, approval_request_id)
            self._outputs.put_nowait(output)

    def _spawn(self, coroutine: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        return self._tasks.spawn(coroutine)

    def _drop_prepared(self, task: asyncio.Task[replies.Answer] | None) -> None:
        if task is None:
            return
        if not task.done():
            task.cancel()
        elif not task.cancelled() and task.exception() is None:
            task.result().drop()

    def _check_open(self) -> None:
        if self._is_closed:
            raise InvalidState(f"the voice stream of session {self.session_id!r} is closed")


def _retrieved(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def _constant(text: str) -> str:
    return text


def _last_user_text(history: Sequence[HistoryTurn]) -> str | None:
    """The last thing the user said; "" if it was not understood, None if the user has not spoken."""
    if not any(turn.role == "user" for turn in history):
        return None
    return next((t.text for t in reversed(history) if t.role == "user" and t.text), "")


def _ms(sample: int) -> int:
    return sample * 1000 // SAMPLE_RATE
