"""The cascade voice model: what every session shares, loaded once per process.

``CascadeModel`` holds the heavy, stateless parts: the recognisers (behind
``asr_batch.Batcher``, which decodes the requests of every session that wait
together as one batch, end-of-turn decodes before live captions, on
``--asr-workers`` threads sized to the cores; ``--asr-batch 1`` is the old
path, one decode at a time in arrival order; the server's default
recogniser, ``--asr-model``, is loaded at start and any other a session
names on first use; ``--asr-model-path`` adds a local CTranslate2 Whisper
directory to them) and the pool of speech worker subprocesses (``tts.Pool``,
``health`` reports on it). Its options come as one ``settings.CascadeSettings``
(each falls back to its ``LIVEGEN_`` variable). Everything a session owns,
from its Silero state to its responses, lives in ``stream.Stream``. ``load``
is the registry's loader: it checks the pinned weights, loads Whisper, starts
the speech workers and warms them up, so the first user does not pay for it.

Replies come from an OpenAI-compatible endpoint where one is set, with
``use_llm`` (``livegen serve --llm-base-url``), else with
``LIVEGEN_LLM_BASE_URL`` / ``LIVEGEN_LLM_MODEL`` (``LIVEGEN_LLM_API_KEY`` if it
needs one) when the model loads; else from the embedded language model
``--llm`` chooses (``livegen.models.llm``: Qwen where the ``llm`` extra is
installed), reached the same way on loopback; else from the built-in responder.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import os
import threading
import time
from collections import Counter, deque
from collections.abc import AsyncGenerator, Hashable, Mapping
from dataclasses import dataclass, field

import numpy as np

from livegen.errors import ConfigError
from livegen.models.cascade import (
    asr,
    asr_batch,
    assets,
    endpoint,
    llm,
    offline,
    remote,
    remote_asr,
    remote_tts,
    tts,
    vad,
    voices,
)
from livegen.models.cascade.settings import CascadeSettings
from livegen.models.cascade.stream import Stream
from livegen.models.llm import choice
from livegen.models.llm.service import EmbeddedLLM
from livegen.models.voice import (
    ClipSegment,
    LLMLimits,
    ModelHealth,
    SpeechStack,
    StreamConfig,
    TurnDetection,
)

#: The embedded model's deadlines: a session it cannot start answering within this (every slot
#: busy, a long queue) fails with ``llm_timeout`` rather than waiting half a minute in silence.
EMBEDDED_LIMITS = LLMLimits(first_token_s=20.0, answer_s=120.0)
#: What a client's transcription model name means when it is not one of ``asr.CHOICES``
#: (OpenAI's names, "whisper-1", "gpt-4o-transcribe"...): the server's default recogniser.
TRANSCRIPTION_MODEL = asr.DEFAULT


@dataclass
class Stats:
    """Counters and recent timings, read by ``livegen bench voice-model``."""

    num_speculations: int = 0
    num_settled: int = 0
    num_speculation_hits: int = 0
    num_prepared_used: int = 0
    #: (seconds of audio, seconds of compute) of recent transcriptions.
    asr: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=1000))
    #: Recognition's queue: waits, batch sizes, captions dropped (also on the serial path).
    batches: asr_batch.BatchStats = field(default_factory=asr_batch.BatchStats)
    #: Transcriptions by the recogniser that made them.
    asr_by_model: Counter[str] = field(default_factory=Counter)
    #: (seconds of audio, seconds from request to result) of recent synthesised pieces.
    tts: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=1000))


class CascadeModel:
    name = "cascade"
    input_rate = vad.SAMPLE_RATE
    output_rate = tts.SAMPLE_RATE
    has_vad = True

    def __init__(
        self,
        recognizer: asr.Recognizer,
        worker: tts.Pool,
        llm_settings: llm.Settings | None = None,
        endpointer: endpoint.Endpointer | None = None,
        choices: Mapping[str, asr.Choice] | None = None,
        settings: CascadeSettings | None = None,
    ) -> None:
        #: The options it was loaded with (``load``), as given: a VAD left None is
        #: ``LIVEGEN_VAD``'s, read when each session opens.
        self.settings = settings or CascadeSettings()
        #: The server's default recogniser.
        self.recognizer = recognizer
        #: The recognisers a session may name: the packaged ones and ``--asr-model-path``'s.
        self.choices = dict(choices or asr.CHOICES)
        self.transcription_models = tuple(self.choices)
        self._recognizers = {recognizer.name: recognizer}
        self._loading_recognizer = threading.Lock()
        self.asr_sizing = AsrSizing.of(self.settings.with_env())
        self.worker = worker
        self.vad_path = str(assets.silero_model())
        #: semantic_vad's end-of-turn model; None without pipecat-ai (semantic_vad is then timed by silence).
        self.endpointer = endpointer
        self.llm = llm_settings
        #: The embedded language model's worker (``--llm``), if one answers; shared by the process.
        self.embedded: EmbeddedLLM | None = None
        self.stats = Stats()
        #: Whether streams start recognising and answering at a pause (off: the benchmark's baseline).
        self.is_speculative = True
        self._asr_thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="livegen-asr")
        self.batcher = self._batcher(self.asr_sizing)
        self.is_closed = False
        #: Remote stages of one server's sessions (``with_speech``); None: the model's own.
        self.remote_voice: remote_tts.RemoteVoice | None = None
        self.remote_recognizer: remote_asr.RemoteRecognizer | None = None

    async def open(self, session_id: str, config: StreamConfig) -> Stream:
        return Stream(self, session_id, config)

    def use_llm(
        self,
        base_url: str | None,
        model: str | None,
        api_key: str | None = None,
        context_tokens: int | None = None,
        limits: LLMLimits | None = None,
    ) -> None:
        """Answer with this OpenAI-compatible endpoint from now on (None: the built-in responder)."""
        self.llm = None
        if base_url:
            self.llm = llm.Settings(
                base_url,
                model or "default",
                api_key,
                context_tokens=context_tokens,
                limits=limits or LLMLimits(),
            )

    def use_embedded(self, settings: CascadeSettings) -> None:
        """Answer with the embedded language model ``settings`` choose (``--llm``), if any: its
        worker is started (once per process) and its prompt cached before the first session."""
        started = choice.start(settings, EMBEDDED_LIMITS)
        if started is not None:
            self.embedded, self.llm = started
            choice.warm_up(self.embedded, self.llm)

    def with_speech(self, stack: SpeechStack) -> CascadeModel:
        """This model, for one server's sessions, speaking and hearing through ``stack``'s remote
        stages: a shallow copy, so the recognisers, speech workers and stats stay shared, while the
        model every server of the process shares (and its /v1/audio/ endpoints) keeps its own."""
        view = copy.copy(self)
        if stack.tts_base_url:
            stage = remote.Stage("tts", stack.tts_base_url, stack.tts_api_key, stack.timeout_s)
            view.remote_voice = remote_tts.RemoteVoice(stage, stack.tts_model)
        if stack.asr_base_url:
            stage = remote.Stage("asr", stack.asr_base_url, stack.asr_api_key, stack.timeout_s)
            view.remote_recognizer = remote_asr.RemoteRecognizer(stage, stack.asr_model)
        return view

    async def close_speech(self) -> None:
        if self.remote_voice is not None:
            await self.remote_voice.aclose()
        for stage in self.remote_stages():
            await stage.aclose()

    def remote_stages(self) -> list[remote.Stage]:
        return [part.stage for part in (self.remote_recognizer, self.remote_voice) if part is not None]

    def size_asr(self, sizing: AsrSizing) -> None:
        """Recognise with this many workers, threads and batch from now on (the benchmark's
        before and after); loads the recognisers again, so only while no session decodes."""
        if self.batcher is not None:
            self.batcher.close()
        self.asr_sizing = sizing
        recognizer = asr.Recognizer.named(self.recognizer.name, sizing.threads, sizing.inter_threads)
        self.recognizer, self._recognizers = recognizer, {recognizer.name: recognizer}
        recognizer.transcribe(np.zeros(vad.SAMPLE_RATE // 2, np.float32))
        self.batcher = self._batcher(sizing)

    def _batcher(self, sizing: AsrSizing) -> asr_batch.Batcher | None:
        if sizing.is_serial:
            return None
        batcher = asr_batch.Batcher(
            self.recognizer_for, self._record_asr, sizing.batch, sizing.workers, stats=self.stats.batches
        )
        return batcher.start()

    async def transcribe(
        self,
        audio: np.ndarray,
        options: asr.Options | None = None,
        priority: asr_batch.Priority = asr_batch.Priority.FINAL,
    ) -> str:
        """Text of ``audio``; a ``CAPTION`` decode waits behind every final and may be cancelled.
        With a remote recogniser, finals (the turn's transcript) are its; captions stay local."""
        if self.remote_recognizer is not None and priority is asr_batch.Priority.FINAL:
            return await self.remote_recognizer.transcribe(audio, options or asr.Options())
        if self.batcher is None:
            loop = asyncio.get_running_loop()
            queued = time.perf_counter()

            def now() -> str:
                started = time.perf_counter()
                self.stats.batches.waits.append(started - queued)
                self.stats.batches.sizes[1] += 1
                text = self.transcribe_now(audio, options)
                self.stats.batches.computes.append(time.perf_counter() - started)
                return text

            return await loop.run_in_executor(self._asr_thread, now)
        return await asyncio.wrap_future(self.batcher.submit(audio, options or asr.Options(), priority))

    async def logprobs(self, audio: np.ndarray, text: str, options: asr.Options) -> list[asr.Logprob]:
        """``text``'s tokens scored against ``audio`` by the session's recogniser: through the
        batcher's queue like a final, or on the serial path's one thread."""
        if self.batcher is not None:
            future = self.batcher.submit_score(audio, text, options)
            scored: list[asr.Logprob] = await asyncio.wrap_future(future)
            return scored

        def score() -> list[asr.Logprob]:
            return self.recognizer_for(options.model).logprobs(audio, text, options.language)

        return await asyncio.get_running_loop().run_in_executor(self._asr_thread, score)

    def transcribe_now(self, audio: np.ndarray, options: asr.Options | None = None) -> str:
        options = options or asr.Options()
        started = time.perf_counter()
        recognizer = self.recognizer_for(options.model)
        text = recognizer.transcribe(
            audio, language=options.language, prompt=options.prompt, prefix=options.prefix
        ).text
        self._record_asr(recognizer.name, len(audio) / vad.SAMPLE_RATE, time.perf_counter() - started)
        return text

    def _record_asr(self, name: str, audio_s: float, compute_s: float) -> None:
        self.stats.asr.append((audio_s, compute_s))
        self.stats.asr_by_model[name] += 1

    def recognizer_for(self, name: str) -> asr.Recognizer:
        """The recogniser ``name`` of ``choices``, loaded on first use; else the default.

        Called on the recogniser threads; a lock makes two sessions naming a new one load it once.
        """
        if name not in self.choices:
            return self.recognizer
        with self._loading_recognizer:
            if name not in self._recognizers:
                sizing = self.asr_sizing
                choice = self.choices[name]
                self._recognizers[name] = asr.Recognizer.of(choice, sizing.threads, sizing.inter_threads)
            return self._recognizers[name]

    def speak(
        self, text: str, voice: str = "", owner: Hashable | None = None, speed: float = 1.0
    ) -> concurrent.futures.Future[tts.Speech]:
        """Synthesise one piece in the assistant's voice: an OpenAI name (``voices``), "joe", or
        "espeak" or "espeak:VOICE" for espeak-ng.

        ``owner`` is the session (or request) asking: owners share the speech workers fairly.
        """
        if self.remote_voice is not None and not voice.startswith("espeak"):
            return self.remote_voice.speak(text, voice, speed)  # on the event loop, as sessions call it
        voice = voices.resolve(voice)  # OpenAI's names: distinct voices of the model's own
        engine, _, espeak_voice = voice.partition(":") if voice.startswith("espeak") else ("piper", "", "")
        started = time.perf_counter()
        future = self.worker.speak(text, engine, espeak_voice, speed, owner=owner)
        future.add_done_callback(lambda done: self._record_tts(done, started))
        return future

    def _record_tts(self, future: concurrent.futures.Future[tts.Speech], started: float) -> None:
        if not future.cancelled() and future.exception() is None:
            seconds = len(future.result().pcm) / 2 / tts.SAMPLE_RATE
            self.stats.tts.append((seconds, time.perf_counter() - started))

    # -- whole clips (``ClipAudio``: the server's /v1/audio/ endpoints) -------------------------
    def accepts_voice(self, voice: str) -> bool:
        return voice in voices.OPENAI_VOICES or offline.accepts_voice(voice)

    def transcribe_clip(
        self, pcm: bytes, model: str = "", language: str = "", prompt: str = "", logprobs: bool = False
    ) -> AsyncGenerator[ClipSegment, None]:
        return offline.transcribe_clip(self, pcm, model, language, prompt, logprobs)

    def speak_text(self, text: str, voice: str = "", speed: float = 1.0) -> AsyncGenerator[bytes, None]:
        return offline.speak_text(self, text, voice, speed)

    def vad_backend(self) -> str:
        """The Silero build a session opened now runs (``--vad``, else ``LIVEGEN_VAD``)."""
        return vad.backend(self.settings.vad)

    def health(self) -> ModelHealth:
        is_ready, reason, workers = self.worker.health()
        sizing = self.asr_sizing  # what the options chose, for an operator to check
        detail: dict[str, object] = {"tts_workers": workers, "vad": self.vad_backend()}
        detail["asr"] = {
            "model": self.recognizer.name,  # the server's recogniser: which one a user hears with
            "batch": sizing.batch,
            "workers": sizing.workers,
            "threads": sizing.threads,
        }
        stages = self.remote_stages()
        if stages:  # which remote stage fails, and why: the server is not ready while one does
            detail["stages"] = {stage.name: stage.report() for stage in stages}
            for stage in (stage for stage in stages if stage.is_failing):
                is_ready, reason = False, f"the remote {stage.name} stage is failing: {stage.error}"
        if self.embedded is not None and self.llm is not None and self.llm.is_assistant:
            detail["llm"] = report = self.embedded.health()
            if report["state"] != "ready":  # its responses fail meanwhile: not ready, and why
                is_ready, reason = False, f"the language model is restarting: {report['last_error']}"
        return ModelHealth(is_ready, reason, detail)

    def close(self) -> None:
        self.is_closed = True
        self.worker.close()
        self._asr_thread.shutdown(wait=False, cancel_futures=True)
        if self.endpointer is not None:
            self.endpointer.close()
        if self.batcher is not None:
            self.batcher.close()
        if self.embedded is not None:
            self.embedded.close()


_loaded: CascadeModel | None = None
_loading = threading.Lock()


def load(settings: CascadeSettings | None = None) -> CascadeModel:
    """The registry's loader: pinned weights from installed packages, offline, warmed up.

    One model per process, whoever asks (each server's registry, the
    benchmark, tests): it holds no session state and is not bound to an event
    loop, and a second copy would only cost seconds and a second worker. So
    the first load's ``settings`` hold; a later one asking for others is refused,
    rather than served with settings it did not ask for.
    """
    global _loaded
    settings = settings or CascadeSettings()
    with _loading:
        if _loaded is None or _loaded.is_closed:
            _loaded = _load(settings)
        elif settings != _loaded.settings:
            raise ConfigError(
                f"the cascade is loaded once per process, and this one already with {_loaded.settings}, "
                f"not {settings}"
            )
        return _loaded


def _load(given: CascadeSettings) -> CascadeModel:
    settings = given.with_env()  # a bad variable fails the load, before any worker starts
    sizing = AsrSizing.of(settings)
    choices = asr_choices(settings.asr_model_path)
    recognizer = asr.Recognizer.of(
        choices[default_asr_model(choices, settings.asr_model)], sizing.threads, sizing.inter_threads
    )
    # One ONNX thread: on two busy cores, Piper with two is slower (measured: 364 vs 524 ms a sentence).
    worker = tts.Pool(threads=settings.tts_threads or 1, size=settings.tts_workers or tts.default_workers())
    model = CascadeModel(recognizer, worker, endpointer=endpoint.load(), choices=choices, settings=given)
    model.use_llm(
        os.environ.get("LIVEGEN_LLM_BASE_URL"),
        os.environ.get("LIVEGEN_LLM_MODEL"),
        os.environ.get("LIVEGEN_LLM_API_KEY"),
        context_tokens=_env_int("LIVEGEN_LLM_CONTEXT_TOKENS", 0) or None,
    )
    if model.llm is None:  # an endpoint named by its variable replaces the embedded model
        model.use_embedded(settings)
    warm_up(model)
    return model


def warm_up(model: CascadeModel) -> None:
    """One tiny transcription, one frame of voice activity and one sentence, so the first session
    runs at full speed."""
    model.recognizer.transcribe(np.zeros(vad.SAMPLE_RATE // 2, np.float32))
    detector = vad.Detector(model.vad_path, TurnDetection(), backend_name=model.settings.vad)
    detector.feed(bytes(2 * vad.FRAME_SAMPLES))
    if model.endpointer is not None:
        model.endpointer.probability_now(np.zeros(vad.SAMPLE_RATE // 2, np.float32))
    for future in [model.worker.speak("Ready.") for _ in model.worker.slots]:
        future.result(timeout=120)


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity): what the cascade sizes itself from.
    Not Ray's ``num_cpus`` (nor the ``OMP_NUM_THREADS`` Ray sets from it in an actor): that is
    where Ray places the speech service, not how many cores its models may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class AsrSizing:
    """How speech recognition uses the cores: ``workers`` batches decoded at once, each on
    ``threads`` cores, at most ``batch`` utterances a batch; ``batch`` 1 is the old path:
    one decode at a time, in arrival order, on ``threads`` cores."""

    batch: int = asr_batch.MAX_BATCH
    workers: int = 1
    threads: int = 2

    @property
    def is_serial(self) -> bool:
        return self.batch == 1

    @property
    def inter_threads(self) -> int:
        return 1 if self.is_serial else self.workers

    @classmethod
    def of(cls, settings: CascadeSettings) -> AsrSizing:
        """``settings``' batch, workers and threads; by default one worker per core (at most 4),
        each on one thread (two decodes on one core each beat one on two)."""
        cores = available_cores()
        batch = settings.asr_batch or asr_batch.MAX_BATCH
        if batch == 1:
            return cls(1, 1, settings.asr_threads or 2)
        workers = settings.asr_workers or min(cores, 4)
        return cls(batch, workers, settings.asr_threads or max(1, cores // workers))

    @classmethod
    def from_env(cls) -> AsrSizing:
        """``LIVEGEN_ASR_BATCH``, ``LIVEGEN_ASR_WORKERS``, ``LIVEGEN_ASR_THREADS``'s sizing."""
        return cls.of(CascadeSettings().with_env())


def asr_choices(path: str | None = None) -> dict[str, asr.Choice]:
    """The recognisers of this process: the packaged ones, and the local CTranslate2 Whisper
    directory ``path`` names (``--asr-model-path``), else ``LIVEGEN_ASR_MODEL_PATH``'s, if any."""
    path = CascadeSettings(asr_model_path=path or None).with_env().asr_model_path
    choices = dict(asr.CHOICES)
    if path:
        from livegen.models.asr.local import local_choice  # a user's directory: its kinds load on use

        local = local_choice(path)
        choices[local.name] = local
    return choices


def default_asr_model(choices: Mapping[str, asr.Choice] | None = None, name: str | None = None) -> str:
    """The server's recogniser: ``name`` (``--asr-model``), else ``LIVEGEN_ASR_MODEL``, else the
    local directory's (``--asr-model-path``), else ``asr.DEFAULT``; one not in ``choices`` is
    refused by name, with the names that are."""
    choices = choices if choices is not None else asr.CHOICES
    local = [choice for choice in choices if choice not in asr.CHOICES]
    name = CascadeSettings(asr_model=name or None).with_env().asr_model
    name = name or (local[0] if local else asr.DEFAULT)
    if name not in choices:
        raise ConfigError(f"unknown speech recogniser {name!r}; choose one of {', '.join(choices)}")
    return name


def check_asr_settings(name: str | None, path: str | None) -> None:
    """``livegen serve``'s check of ``--asr-model`` and ``--asr-model-path`` before the server
    starts: a wrong name or directory is refused then, by name, not when the model loads."""
    default_asr_model(asr_choices(path), name)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() and int(value) > 0 else default
