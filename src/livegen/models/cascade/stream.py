"""One session's cascade: input audio -> Silero turns -> Whisper -> a reply -> Piper, as outputs.

``Stream`` is the ``VoiceStream`` of the cascade. It owns the session's
Silero state and when each thing happens: the turns it detects, the
transcripts it starts, the responses running, the outputs and every task. Two
parts it owns hold the rest, each in a module of its own: ``turn.Turn``, the
turn heard so far (its uncommitted audio, 16 kHz PCM16 counted in samples
since the session started, its settled transcripts, the speculation at its
last pause), and ``answering.Answering``, what it answers with (the language
model, the prepared answer, MCP tools, speaking). The shared parts (Whisper,
the speech workers) belong to ``model.CascadeModel``; the epoch fence and the
conversation belong to the session core, which is why every output carries
the epoch of the call it answers and why a cancelled response simply stops,
without a terminal output.

Latency comes from doing the work before the turn ends. At a short pause
(``vad.Event.PAUSE``, a fifth of the silence window) the stream
transcribes what it has and prepares the answer, including the audio of its
first sentence. If the user goes on, the answer is dropped, and the partial
transcript is kept when it covers enough speech (``turn.SETTLE_S``), so a long
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
import concurrent.futures
import functools
import logging
from collections.abc import AsyncIterator, Coroutine, Hashable, Mapping
from typing import Any, Protocol, TypeVar

import numpy as np

from livegen import tasks
from livegen.errors import CapacityExceeded, InvalidRequest, InvalidState
from livegen.models.cascade import (
    asr,
    barge_in,
    captions,
    denoise,
    endpoint,
    incomplete,
    llm,
    replies,
    transcripts,
    tts,
    vad,
)
from livegen.models.cascade.answering import Answering
from livegen.models.cascade.asr_batch import Priority
from livegen.models.cascade.settings import CascadeSettings
from livegen.models.cascade.turn import Speculation, Turn
from livegen.models.voice import (
    OutputKind,
    ResponseRequest,
    StreamConfig,
    TurnDetection,
    Usage,
    VoiceOutput,
)


class Counts(Protocol):
    """The model's counters a stream and its parts move (``model.Stats``)."""

    num_speculations: int
    num_settled: int
    num_speculation_hits: int
    num_prepared_used: int


class CascadeModel(Protocol):
    """What a stream uses of its model (``model.CascadeModel``, which opens it), declared here so
    that this module never imports the model's."""

    @property
    def vad_path(self) -> str: ...

    @property
    def settings(self) -> CascadeSettings: ...

    @property
    def endpointer(self) -> endpoint.Endpointer | None: ...

    @property
    def llm(self) -> llm.Settings | None: ...

    @property
    def stats(self) -> Counts: ...

    @property
    def is_speculative(self) -> bool: ...

    def speak(
        self, text: str, voice: str = "", owner: Hashable | None = None, speed: float = 1.0
    ) -> concurrent.futures.Future[tts.Speech]: ...

    async def transcribe(
        self, audio: np.ndarray, options: asr.Options | None = None, priority: Priority = Priority.FINAL
    ) -> str: ...

    async def logprobs(self, audio: np.ndarray, text: str, options: asr.Options) -> list[asr.Logprob]: ...


logger = logging.getLogger("livegen.models.cascade")

T = TypeVar("T")

SAMPLE_RATE = vad.SAMPLE_RATE
#: Uncommitted audio beyond this is refused: commit or clear the buffer.
MAX_BUFFER_S = 300
#: Appends up to this long (100 ms) run the detector inline; longer ones on a thread.
_INLINE_FEED_BYTES = SAMPLE_RATE // 10 * 2


class Stream:
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
        self._responses: dict[str, tuple[int, asyncio.Task[None]]] = {}
        #: Every task the stream starts, its responses' too: ``aclose`` cancels and awaits them.
        self._tasks = tasks.TaskSet()
        self._is_closed = False
        #: Live captions of the turn being spoken, and the completed transcripts.
        self._transcripts = transcripts.Transcripts(self._transcribe, self._score, self._spawn, self._emit)
        self._turn = Turn(self._transcripts, model.stats)
        #: The session's noise reduction (None: off) and its check of speech over an answer.
        self._denoiser = denoise.for_session(None, config.noise_reduction)
        self._gate = barge_in.Gate(self._transcribe, self._score, self._spawn)
        self._gate.is_on = barge_in.is_wanted(config)
        client = llm.Client(model.llm) if model.llm else None
        #: Speech for this session: the workers are shared fairly between sessions.
        say: replies.Speak = functools.partial(model.speak, owner=session_id)
        self._answers = Answering(
            config, client, say, self._gate, self._emit, self._spawn, self._report_listing, model.stats
        )

    # -- the VoiceStream calls -------------------------------------------------------------------

    async def append(self, epoch: int, pcm: bytes) -> None:
        self._check_open()
        if len(pcm) % 2:
            raise InvalidRequest(f"input audio must be whole PCM16 samples; got {len(pcm)} bytes")
        if self._turn.end - self._turn.start + len(pcm) // 2 > MAX_BUFFER_S * SAMPLE_RATE:
            raise CapacityExceeded(
                f"more than {MAX_BUFFER_S} s of uncommitted audio; commit or clear the input buffer"
            )
        if self._denoiser is not None:  # about 5 ms per 100 ms of audio: never on the event loop
            pcm = await asyncio.to_thread(self._denoiser.process, pcm)
        self._turn.extend(pcm)
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
        self._gate.step(self._detector.turns, lambda start: self._turn.audio(start, self._turn.end))
        padding = self._detector.turns.settings.prefix_padding_ms * SAMPLE_RATE // 1000
        self._turn.drop_leading_silence(
            (padding + vad.FRAME_SAMPLES) * 2, self._detector.turns.held is not None
        )
        self._live_caption(epoch)

    async def commit(self, epoch: int, item_id: str) -> None:
        self._check_open()
        tail, prepared = self._turn.take(self._detector.turns.last_speech, self._spawn, self._transcribe)
        caption = self._transcripts.of_turn(self._turn.end, self._turn.audio)
        # With ``include`` logprobs: the turn's audio, to score the transcript's tokens against.
        wants_logprobs = self._config.transcription_logprobs
        heard = self._turn.audio(self._turn.start, self._turn.end) if wants_logprobs else None
        parts = [*self._turn.settled, tail]
        task = self._spawn(self._transcripts.complete(epoch, item_id, parts, caption, heard))
        self._answers.committed(task, prepared)
        self._turn.reset(self._detector.turns.is_speaking)

    async def clear(self, epoch: int) -> None:
        self._check_open()
        self._turn.drop_speculation(keep_transcript=False)
        for task in self._turn.settled:
            task.cancel()
        self._detector.turns.reset()
        self._turn.reset(self._detector.turns.is_speaking)

    async def respond(self, epoch: int, request: ResponseRequest) -> None:
        self._check_open()
        if request.response_id in self._responses:
            raise InvalidState(f"response {request.response_id!r} is already running")
        task = self._spawn(self._answers.respond(epoch, request))
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
        self._answers.update(config)

    async def approve(self, epoch: int, approval_request_id: str, approve: bool) -> None:
        """The client's answer to an approval request of a response's MCP call."""
        self._answers.approve(approval_request_id, approve)

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
        self._turn.drop_speculation(keep_transcript=False)
        await self._answers.aclose()
        self._outputs.put_nowait(None)

    # -- turns -----------------------------------------------------------------------------------

    def _on_turn(self, epoch: int, turn: vad.Turn) -> None:
        is_server_vad = self._config.turn_detection is not None
        if turn.event is vad.Event.SPEECH_STARTED:
            self._turn.speech_started(turn.sample)
            if is_server_vad:
                self._emit(OutputKind.SPEECH_STARTED, epoch, audio_ms=_ms(turn.sample))
        elif turn.event is vad.Event.PAUSE:
            self._speculate()
        elif turn.event is vad.Event.RESUMED:
            self._turn.drop_speculation(keep_transcript=True)
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
        audio = self._turn.audio(max(start, sample - endpoint.WINDOW_S * SAMPLE_RATE), sample)
        try:
            probability = await endpointer.probability(audio)
        except Exception:
            logger.exception("the end-of-turn model failed; the turn ends at the maximum wait")
            return
        if probability < vad.COMPLETE_AT.get(self._detector.turns.settings.eagerness or "", 0.5):
            return
        if incomplete.holds(await self._turn.heard_at(sample)):  # "book a table for": the words go on
            return
        if self._is_feeding:  # the detector is on a thread: the append applies the verdict after it
            self._verdict = sample
            return
        for turn in self._detector.turns.complete(sample):
            self._on_turn(self._epoch, turn)

    def _speculate(self) -> None:
        self._turn.drop_speculation(keep_transcript=False)
        if not self._model.is_speculative or not self._answers.mcp.is_empty:
            return  # (a speculative answer must never call an MCP tool: the call may act)
        start, end = self._turn.settled_until, self._turn.end
        transcript = self._spawn(self._transcribe(self._turn.audio(start, end)))
        prepared = None
        if self._answers.can_prepare:
            prepared = self._spawn(
                self._answers.prepare(list(self._turn.settled), transcript, self._config.voice)
            )
            # A transcript that failed fails this too; the response that waits on the transcript
            # reports it (asr_unavailable), so it is not logged again as never retrieved.
            prepared.add_done_callback(_retrieved)
        self._turn.speculation = Speculation(start, end, transcript, prepared)
        self._model.stats.num_speculations += 1

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
        if self._detector.turns.is_speaking and self._turn.speculation is None:
            step_s = captions.DELAY_STEP_S.get(self._config.transcription_delay, captions.STEP_S)
            self._transcripts.caption(epoch, self._turn.end, self._turn.audio, step_s)

    # -- responses -------------------------------------------------------------------------------

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

    def _check_open(self) -> None:
        if self._is_closed:
            raise InvalidState(f"the voice stream of session {self.session_id!r} is closed")


def _retrieved(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _ms(sample: int) -> int:
    return sample * 1000 // SAMPLE_RATE
