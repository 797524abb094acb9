"""The cascade voice model: what every session shares, loaded once per process.

``CascadeModel`` holds the heavy, stateless parts: the recognisers (behind one
worker thread, so two sessions never fight over the two cores inside
CTranslate2; the server's default, ``--asr-model`` or ``LIVEGEN_ASR_MODEL``,
loaded at start and any other a session names loaded on first use)
and the pool of speech worker subprocesses (``tts.Pool``, ``health`` reports
on it). Everything a session owns,
from its Silero state to its responses, lives in ``stream.Stream``. ``load``
is the registry's loader: it checks the pinned weights, loads Whisper, starts
the speech workers and warms them up, so the first user does not pay for it.

Replies come from the built-in responder unless a language model is set,
with ``LIVEGEN_LLM_BASE_URL`` / ``LIVEGEN_LLM_MODEL`` (``LIVEGEN_LLM_API_KEY``
if it needs one) or ``use_llm`` after loading.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np

from livegen.errors import ConfigError
from livegen.models.cascade import asr, assets, llm, tts, vad
from livegen.models.cascade.stream import Stream
from livegen.models.voice import ModelHealth, StreamConfig

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
        self, recognizer: asr.Recognizer, worker: tts.Pool, llm_settings: llm.Settings | None = None
    ) -> None:
        #: The server's default recogniser.
        self.recognizer = recognizer
        self._recognizers = {recognizer.name: recognizer}
        self._asr_threads = _env_int("LIVEGEN_ASR_THREADS", 2)
        self.worker = worker
        self.vad_path = str(assets.silero_model())
        self.llm = llm_settings
        self.stats = Stats()
        #: Whether streams start recognising and answering at a pause (off: the benchmark's baseline).
        self.is_speculative = True
        self._asr_thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="livegen-asr")
        self.is_closed = False

    async def open(self, session_id: str, config: StreamConfig) -> Stream:
        return Stream(self, session_id, config)

    def use_llm(
        self,
        base_url: str | None,
        model: str | None,
        api_key: str | None = None,
        context_tokens: int | None = None,
    ) -> None:
        """Answer with this OpenAI-compatible endpoint from now on (None: the built-in responder)."""
        self.llm = None
        if base_url:
            self.llm = llm.Settings(base_url, model or "default", api_key, context_tokens=context_tokens)

    async def transcribe(self, audio: np.ndarray, options: asr.Options | None = None) -> str:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._asr_thread, self.transcribe_now, audio, options)

    async def logprobs(self, audio: np.ndarray, text: str, options: asr.Options) -> list[asr.Logprob]:
        """``text``'s tokens scored against ``audio`` by the session's recogniser, on its thread."""

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
        self.stats.asr.append((len(audio) / vad.SAMPLE_RATE, time.perf_counter() - started))
        self.stats.asr_by_model[recognizer.name] += 1
        return text

    def recognizer_for(self, name: str) -> asr.Recognizer:
        """The recogniser ``name`` of ``asr.CHOICES``, loaded on first use; else the default.

        Called on the recogniser thread only, so two sessions naming a new one load it once.
        """
        if name not in asr.CHOICES:
            return self.recognizer
        if name not in self._recognizers:
            self._recognizers[name] = asr.Recognizer.named(name, self._asr_threads)
        return self._recognizers[name]

    def speak(
        self, text: str, voice: str = "", owner: str | None = None
    ) -> concurrent.futures.Future[tts.Speech]:
        """Synthesise one piece in the assistant's voice; "espeak" or "espeak:VOICE" picks espeak-ng.

        ``owner`` is the session asking: sessions share the speech workers fairly.
        """
        engine, _, espeak_voice = voice.partition(":") if voice.startswith("espeak") else ("piper", "", "")
        started = time.perf_counter()
        future = self.worker.speak(text, engine, espeak_voice, owner=owner)
        future.add_done_callback(lambda done: self._record_tts(done, started))
        return future

    def _record_tts(self, future: concurrent.futures.Future[tts.Speech], started: float) -> None:
        if not future.cancelled() and future.exception() is None:
            seconds = len(future.result().pcm) / 2 / tts.SAMPLE_RATE
            self.stats.tts.append((seconds, time.perf_counter() - started))

    def health(self) -> ModelHealth:
        is_ready, reason, workers = self.worker.health()
        return ModelHealth(is_ready, reason, {"tts_workers": workers})

    def close(self) -> None:
        self.is_closed = True
        self.worker.close()
        self._asr_thread.shutdown(wait=False, cancel_futures=True)


_loaded: CascadeModel | None = None
_loading = threading.Lock()


def load() -> CascadeModel:
    """The registry's loader: pinned weights from installed packages, offline, warmed up.

    One model per process, whoever asks (each server's registry, the
    benchmark, tests): it holds no session state and is not bound to an event
    loop, and a second copy would only cost seconds and a second worker.
    """
    global _loaded
    with _loading:
        if _loaded is None or _loaded.is_closed:
            _loaded = _load()
        return _loaded


def _load() -> CascadeModel:
    recognizer = asr.Recognizer.named(default_asr_model(), threads=_env_int("LIVEGEN_ASR_THREADS", 2))
    # One ONNX thread: on two busy cores, Piper with two is slower (measured: 364 vs 524 ms a sentence).
    worker = tts.Pool(threads=_env_int("LIVEGEN_TTS_THREADS", 1), size=tts.default_workers())
    model = CascadeModel(recognizer, worker)
    model.use_llm(
        os.environ.get("LIVEGEN_LLM_BASE_URL"),
        os.environ.get("LIVEGEN_LLM_MODEL"),
        os.environ.get("LIVEGEN_LLM_API_KEY"),
        context_tokens=_env_int("LIVEGEN_LLM_CONTEXT_TOKENS", 0) or None,
    )
    warm_up(model)
    return model


def warm_up(model: CascadeModel) -> None:
    """One tiny transcription and one sentence, so the first session runs at full speed."""
    model.recognizer.transcribe(np.zeros(vad.SAMPLE_RATE // 2, np.float32))
    for future in [model.worker.speak("Ready.") for _ in model.worker.slots]:
        future.result(timeout=120)


def default_asr_model() -> str:
    """The server's recogniser: ``LIVEGEN_ASR_MODEL`` (``--asr-model``), else ``asr.DEFAULT``."""
    name = os.environ.get("LIVEGEN_ASR_MODEL") or asr.DEFAULT
    if name not in asr.CHOICES:
        raise ConfigError(f"unknown speech recogniser {name!r}; choose one of {', '.join(asr.CHOICES)}")
    return name


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() and int(value) > 0 else default
