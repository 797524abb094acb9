"""The cascade's heavy parts as one model service of a Ray cluster, shared by every server process.

``livegen serve --workers N`` (and ``--ray-address``) runs many server
processes; each used to load the whole cascade: Whisper, the speech worker
pool (a Piper process each) and Smart Turn. Here they are loaded once per
cluster, in one Ray actor, ``SpeechService`` (named ``livegen-speech`` in the
cluster's namespace; whichever process asks first creates it, the others get
the same one: ``get_if_exists``; Ray places it on a node with a free CPU and
restarts it if it dies: ``max_restarts``). A server process of a cluster
(``LIVEGEN_CLUSTER``, ``mode.py``, set by ``cluster/supervisor.py``) loads ``SharedCascade``
instead: the same ``CascadeModel`` for its sessions' streams, whose
recognition, speech and end-of-turn calls go to the service, awaited on the
event loop (Ray's object refs are awaitable), never blocking it. A piece's
speech comes back as a Ray generator of chunks, read as they arrive into the
same ``remote_tts.StreamedSpeech`` a remote voice fills, so the stream speaks
each piece as soon as it is made, as in process. A cancel (barge-in, a
dropped caption) cancels the actor's task, which cancels the work queued in
the pool or the batcher.

What stays in each process, and why: Silero VAD, the per-frame detector.
It runs on every 20 ms frame of every session and keeps a session's state.
Measured on this 2-core machine (load 1.6): an actor call's round trip with a
frame took 1.8 ms, Silero's own work on the frame 0.15 to 0.25 ms: at 50
frames a second a session, each crossing would cost more than the work it
moves, to save a few MiB of ONNX per process. Smart Turn
is called at a pause only (10 to 30 ms a call), so it moves with Whisper. The
language model stays per process too: it is an HTTP client.

A service that dies mid-call (its process killed, its node lost) fails only
the calls in flight: their responses end ``failed`` with
``speech_service_unavailable``. So do calls made while Ray restarts it (Ray
refuses them at once rather than hold a response for the seconds the models
take to load); once it is back the next response is served. The actor is
detached: a server process that dies (the one that created it, say) does not
take it along; the last ``livegen serve`` of the cluster stops it. A handle
whose actor is gone for good (killed by hand) is looked up or created again on
the next call. One service per cluster: every ``livegen serve`` of it shares
it, configured by the first (its ``--asr-*``, ``--tts-*`` settings).
``/health``'s ``cluster`` block names the service (its ``report``: where,
what it loaded, its calls, whether it was restarted), and each process's voice
model reports the last failure it saw.

A service that stops answering without dying (its process stopped, SIGSTOP,
or frozen) fails no call: each would wait for it. So each process sends it a
heartbeat (``Heartbeat``: a thread, every ``HEARTBEAT_S``, answered by the
service's event loop even while it serves), and one unanswered for
``LIVENESS_S`` makes that process's voice model not ready, with why
(``/health`` 503), as a dead service is; so does a service that answers but is
not ready itself (a speech worker of its pool stopped and restarting). A call
made while it is silent fails at once (``speech_service_unavailable``) rather
than wait; the next heartbeat answered makes it ready again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Hashable
from typing import Any

import numpy as np

from livegen import tasks
from livegen.cluster.ray import import_ray, service_head, was_restarted
from livegen.errors import ConfigError, ModelError, SpeechServiceUnavailable
from livegen.models.cascade import asr, asr_batch, assets, model, remote_tts, speaking, tts
from livegen.models.cascade.model import CascadeModel, Stats
from livegen.models.cascade.settings import CascadeSettings
from livegen.models.voice import ModelHealth

#: The service's actor name, in the namespace of the cluster's processes.
NAME = "livegen-speech"
#: CPUs the service asks Ray for: where it is placed (its recogniser and speech workers use them).
NUM_CPUS = 1
#: Bytes of PCM16 (24 kHz) per chunk of a piece's speech: 1 s, small enough to travel inline.
CHUNK_BYTES = tts.SAMPLE_RATE * 2
#: Seconds ``/health`` reports the service failing after a failed call (unless one succeeds).
FAILING_S = 30.0
#: Recent recognitions and pieces ``report`` summarises (its queue waits, its pieces' times).
RECENT = 200
#: How long the service may take to be placed and load its models before the server's start fails.
START_TIMEOUT_S = 600.0
#: How often each server process asks the service whether it is there and ready (``Heartbeat``).
HEARTBEAT_S = 1.0
#: A heartbeat unanswered this long: the service stopped answering (stopped, frozen).
LIVENESS_S = 5.0


class SpeechService:
    """The actor's body: the cascade of this process (``model.load``), its recognisers, speech
    workers and end-of-turn model, serving every server process of the cluster."""

    def __init__(self, settings: CascadeSettings) -> None:
        self.model = model.load(settings)
        self.model.use_llm(None, None)  # answers are each server process's own
        self.started_at = time.time()
        self.calls: dict[str, int] = {}
        #: Whether Ray restarted this service (its process died): it loaded the models again.
        self.restarted = was_restarted()

    def _count(self, call: str) -> None:
        self.calls[call] = self.calls.get(call, 0) + 1

    async def info(self) -> dict[str, Any]:
        """What a server process's ``SharedCascade`` needs to know of the model."""
        return {
            "transcription_models": list(self.model.transcription_models),
            "has_endpointer": self.model.endpointer is not None,
        }

    async def heartbeat(self) -> tuple[bool, str]:
        """Whether the service serves, and why not (its speech workers' and recognisers' health)."""
        health = self.model.health()
        return health.ready, health.reason

    async def transcribe(self, audio: np.ndarray, options: asr.Options, priority: asr_batch.Priority) -> str:
        self._count("transcribe")
        return await self.model.transcribe(audio, options, priority)

    async def logprobs(self, audio: np.ndarray, text: str, options: asr.Options) -> list[asr.Logprob]:
        self._count("logprobs")
        return await self.model.logprobs(audio, text, options)

    async def encode(self, name: str, language: str, text: str) -> list[int]:
        """``text`` in the tokens of recogniser ``name`` (a clip's usage counts them)."""
        tokenizer = self.model.recognizer_for(name)._tokenizer(language)
        return list(await asyncio.to_thread(tokenizer.encode, text))

    async def end_probability(self, audio: np.ndarray) -> float:
        self._count("end_of_turn")
        assert self.model.endpointer is not None
        return await self.model.endpointer.probability(audio)

    async def speak(
        self, text: str, voice: str, owner: Hashable | None, speed: float
    ) -> AsyncIterator[bytes]:
        """One piece's PCM16 at 24 kHz in chunks (a Ray generator); espeak-ng's where Piper fails."""
        self._count("speak")
        say = functools.partial(self.model.speak, owner=owner, speed=speed)
        audio = say(text, voice)
        try:
            speech = await speaking.speech_of(audio, text, say)
        finally:
            audio.cancel()  # a cancelled call (a barge-in): the pool drops the piece
        for start in range(0, len(speech.pcm), CHUNK_BYTES):
            yield speech.pcm[start : start + CHUNK_BYTES]

    async def report(self) -> dict[str, Any]:
        """The service for ``/health``: where it runs, what it loaded, how it is."""
        return {
            **service_head(NAME, self.started_at, self.restarted, self.model.health()),
            "recognizers": sorted(self.model._recognizers),
            "tts_workers": len(self.model.worker.slots),
            "end_of_turn_model": self.model.endpointer is not None,
            "calls": dict(self.calls),
            "load": self._load(),
        }

    def _load(self) -> dict[str, Any]:
        """How the service's models are sized and how busy they are: the cores it sized from (the
        node's, not Ray's ``num_cpus``), the recogniser's sizing and queue, the recent pieces'
        time from request to speech (the last ``RECENT`` each)."""
        stats, sizing = self.model.stats, self.model.asr_sizing
        waits = list(stats.batches.waits)[-RECENT:]
        pieces = [seconds for _, seconds in list(stats.tts)[-RECENT:]]
        return {
            "cores": model.available_cores(),
            "asr": {"batch": sizing.batch, "workers": sizing.workers, "threads": sizing.threads},
            "asr_decodes": sum(size * count for size, count in stats.batches.sizes.items()),
            "asr_batches": sum(stats.batches.sizes.values()),
            "asr_wait_p50_ms": _ms_at(waits, 0.5),
            "asr_wait_p95_ms": _ms_at(waits, 0.95),
            "speech_pieces": len(stats.tts),
            "speech_p50_ms": _ms_at(pieces, 0.5),
            "speech_p95_ms": _ms_at(pieces, 0.95),
        }


def _ms_at(seconds: list[float], share: float) -> float | None:
    """The ``share`` quantile of ``seconds``, in milliseconds (None: none yet)."""
    if not seconds:
        return None
    ordered = sorted(seconds)
    return round(1000 * ordered[min(len(ordered) - 1, int(share * len(ordered)))], 1)


def _actor(settings: CascadeSettings) -> Any:
    """The cluster's speech service: created here, with ``settings``, if no process has yet (blocks:
    off the loop). The settings go whole and resolved (flag, else variable): no variable of this
    process, and so no remote stage's key (``LIVEGEN_ASR_API_KEY``), lands in Ray's metadata."""
    ray = import_ray()
    actor = ray.remote(num_cpus=NUM_CPUS, max_restarts=-1, max_concurrency=1000)(SpeechService)
    # Detached: the process that happens to create it may die while the others serve on; the last
    # ``livegen serve`` of the cluster stops it (``cluster/coordinator.py``).
    options: dict[str, Any] = {"name": NAME, "get_if_exists": True, "lifetime": "detached"}
    return actor.options(**options).remote(settings)


def connect(settings: CascadeSettings | None = None) -> SharedCascade:
    """The loader of a server process of a cluster: the shared service, waited for until ready."""
    ray = import_ray()
    settings = (settings or CascadeSettings()).with_env()
    actor = _actor(settings)
    try:
        info = ray.get(actor.info.remote(), timeout=START_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        raise ConfigError(
            f"the cluster's speech service ({NAME}) was not ready within {START_TIMEOUT_S:.0f} s: "
            f"does a node have {NUM_CPUS} CPU free?"
        ) from None
    shared = SharedCascade(actor, info, settings)
    shared.heartbeat.start()
    return shared


class Heartbeat:
    """A server process's heartbeat to the service: a thread that asks it every ``HEARTBEAT_S``
    whether it is there and ready; ``problem`` says why not ("" while it is)."""

    def __init__(self, shared: SharedCascade) -> None:
        self._shared = shared
        self.problem = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="speech-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        ray = import_ray()
        while not self._stop.wait(HEARTBEAT_S):
            try:
                ready, reason = ray.get(self._shared.actor.heartbeat.remote(), timeout=LIVENESS_S)
            except ray.exceptions.GetTimeoutError:
                silent = f"no heartbeat answered for {LIVENESS_S:.0f} s"
                self.problem = f"the cluster's speech service ({NAME}) stopped answering ({silent})"
                continue
            except Exception:  # dead or restarting: the calls' own failures say so
                self.problem = ""
                continue
            self.problem = "" if ready else f"the cluster's speech service ({NAME}) is not ready: {reason}"


class _Tokenizer:
    """A recogniser's tokenizer in the service (``offline`` counts a clip's tokens with it, on a
    thread: each ``encode`` waits for the service)."""

    def __init__(self, shared: SharedCascade, name: str, language: str) -> None:
        self._shared, self._name, self._language = shared, name, language

    def encode(self, text: str) -> list[int]:
        ray = import_ray()
        tokens: list[int] = ray.get(self._shared.actor.encode.remote(self._name, self._language, text))
        return tokens


class _Recognizer:
    """What a clip's usage asks of a recogniser here: its name and its tokenizer."""

    def __init__(self, shared: SharedCascade, name: str) -> None:
        self._shared, self.name = shared, name

    def _tokenizer(self, language: str) -> _Tokenizer:
        return _Tokenizer(self._shared, self.name, language)


class _Endpointer:
    """Smart Turn in the service, with the in-process ``Endpointer``'s awaited call."""

    def __init__(self, shared: SharedCascade) -> None:
        self._shared = shared
        self.timings: deque[float] = deque(maxlen=1000)

    async def probability(self, audio: np.ndarray) -> float:
        started = time.perf_counter()
        probability: float = await self._shared.call("end_probability", audio)
        self.timings.append(time.perf_counter() - started)
        return probability

    def close(self) -> None:
        pass


class SharedCascade(CascadeModel):
    """The cascade of a server process in a cluster: sessions' streams here, models in the service.

    Not ``CascadeModel.__init__``: that loads the recognisers and starts the workers. Everything a
    stream reads of its model is set here; the rest answers from the service.
    """

    def __init__(self, actor: Any, info: dict[str, Any], settings: CascadeSettings) -> None:
        self.actor = actor
        #: The process's settings: its detector's backend (``vad``) is read here; the rest were the
        #: service's when this process created it (the first process's: one service a cluster).
        self.settings = settings
        self.choices = {}
        self.transcription_models = tuple(info["transcription_models"])
        self.vad_path = str(assets.silero_model())  # the per-frame detector stays in this process
        self.endpointer = _Endpointer(self) if info["has_endpointer"] else None  # type: ignore[assignment]
        self.llm = None
        self.stats = Stats()
        self.is_speculative = True
        self.batcher = None
        self.is_closed = False
        self.remote_voice = None
        self.remote_recognizer = None
        #: Whether the actor handle failed as a lost actor's: the next call looks it up again.
        self.is_lost = False
        self.failures = 0
        self.error = ""
        self.failed_at = 0.0
        #: The pieces' fetches from the service, ended with the model's speech (``close_speech``).
        self._fetches = tasks.TaskSet()
        #: Whether the service answers and is ready (started by ``connect``).
        self.heartbeat = Heartbeat(self)

    async def _service(self) -> Any:
        if self.is_lost:  # restarting: the same actor; gone for good: found or made again
            self.actor, self.is_lost = await asyncio.to_thread(_actor, self.settings), False
        return self.actor

    async def call(self, method: str, *args: Any) -> Any:
        """``method`` of the service, awaited; its failures as ``ModelError``s, a lost service as
        ``SpeechServiceUnavailable``. A cancel cancels the service's task."""
        ray = import_ray()
        self._check_answering()
        ref = getattr(await self._service(), method).remote(*args)
        try:
            result = await ref
        except asyncio.CancelledError:
            ray.cancel(ref)
            raise
        except Exception as exc:
            raise self._failure(exc) from exc
        self.error = ""
        return result

    def _check_answering(self) -> None:
        """A service that stopped answering fails a call at once (it would wait for it)."""
        problem = self.heartbeat.problem
        if "stopped answering" in problem:
            raise SpeechServiceUnavailable(problem)

    def _failure(self, exc: Exception) -> Exception:
        """The error a session sees: the service's own (a speech worker's) or its loss."""
        ray = import_ray()
        if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(exc.cause, ModelError):
            return exc.cause
        self.is_lost = self.is_lost or isinstance(exc, ray.exceptions.RayActorError)
        reason = f"the cluster's speech service ({NAME}) failed: {type(exc).__name__}: {str(exc)[:300]}"
        self.failures += 1
        self.error, self.failed_at = reason, time.time()
        return SpeechServiceUnavailable(reason)

    async def transcribe(
        self,
        audio: np.ndarray,
        options: asr.Options | None = None,
        priority: asr_batch.Priority = asr_batch.Priority.FINAL,
    ) -> str:
        if self.remote_recognizer is not None and priority is asr_batch.Priority.FINAL:
            return await self.remote_recognizer.transcribe(audio, options or asr.Options())
        text: str = await self.call("transcribe", audio, options or asr.Options(), priority)
        return text

    async def logprobs(self, audio: np.ndarray, text: str, options: asr.Options) -> list[asr.Logprob]:
        scored: list[asr.Logprob] = await self.call("logprobs", audio, text, options)
        return scored

    def transcribe_now(self, audio: np.ndarray, options: asr.Options | None = None) -> str:
        """Blocking (a test's or a benchmark's thread, never the event loop)."""
        ray = import_ray()
        ref = self.actor.transcribe.remote(audio, options or asr.Options(), asr_batch.Priority.FINAL)
        text: str = ray.get(ref)
        return text

    def recognizer_for(self, name: str) -> _Recognizer:  # type: ignore[override]
        return _Recognizer(self, name)

    def speak(
        self, text: str, voice: str = "", owner: Hashable | None = None, speed: float = 1.0
    ) -> concurrent.futures.Future[tts.Speech]:
        """The piece's speech as it arrives from the service (``StreamedSpeech``): started at once,
        on the event loop, as sessions call it."""
        if self.remote_voice is not None and not voice.startswith("espeak"):
            return self.remote_voice.speak(text, voice, speed)
        # Owners share the service's workers fairly; a session id is the cluster's own, an object's
        # id is this process's only.
        key = owner if isinstance(owner, str) or owner is None else f"{os.getpid()}:{id(owner)}"
        speech = remote_tts.StreamedSpeech()
        speech._task = self._fetches.spawn(self._fetch(speech, text, voice, key, speed))
        return speech

    async def close_speech(self) -> None:
        await self._fetches.aclose()  # the pieces still arriving: cancelled, so the service's too
        await super().close_speech()

    async def _fetch(
        self, speech: remote_tts.StreamedSpeech, text: str, voice: str, owner: Hashable | None, speed: float
    ) -> None:
        ray = import_ray()
        chunks = None
        try:
            self._check_answering()
            chunks = (await self._service()).speak.remote(text, voice, owner, speed)
            async for ref in chunks:
                speech.push(await ref)
        except asyncio.CancelledError:
            if chunks is not None:
                ray.cancel(chunks)
            speech.fail(SpeechServiceUnavailable("cancelled"))
            raise
        except SpeechServiceUnavailable as exc:  # it stopped answering: not asked at all
            speech.fail(exc)
        except Exception as exc:
            speech.fail(self._failure(exc))
        else:
            self.error = ""
            speech.finish()

    def size_asr(self, sizing: model.AsrSizing) -> None:
        raise ConfigError(
            "the cluster's speech service sizes its recognisers (the --asr-* of the server that started it)"
        )

    def health(self) -> ModelHealth:
        is_failing = bool(self.error) and time.time() - self.failed_at < FAILING_S
        report: dict[str, Any] = {"name": NAME, "ok": not is_failing, "failures": self.failures}
        if self.error:
            report.update(error=self.error, failed_at=self.failed_at)
        is_ready, reason = not is_failing, self.error if is_failing else ""
        if self.heartbeat.problem:  # stopped answering, or not ready itself
            report["ok"] = False
            is_ready, reason = False, self.heartbeat.problem
        for stage in (stage for stage in self.remote_stages() if stage.is_failing):
            is_ready, reason = False, f"the remote {stage.name} stage is failing: {stage.error}"
        return ModelHealth(is_ready, reason, {"speech_service": report})

    def close(self) -> None:
        self.is_closed = True  # the service is the cluster's: it stays
        self.heartbeat.stop()
