"""The speech-synthesis worker: Piper and espeak-ng in their own process.

Run as ``python -m livegen.models.cascade.tts_worker``. Both synthesisers are
GPL-3.0 (Piper's code, and espeak-ng, which Piper links for phonemes), so
livegen never loads them into its own process: it starts this worker and
exchanges ``wire`` frames with it over stdin/stdout. ``tts.Pool`` runs a few
of them, gives each one job at a time, and restarts one that dies or hangs.

Requests: ``{"op": "speak", "id", "text", "engine", "voice", "speed"}`` (one
piece of a sentence each), ``{"op": "cancel", "id"}`` and ``{"op": "ping",
"id"}``. Replies: first a ``{"op": "ready", "engines", "errors",
"sample_rate"}`` hello, then one ``{"id", "status": "ok" | "cancelled" |
"error" | "pong", "engine"}`` frame per request, with PCM16 at
``sample_rate`` as the payload of ``ok``. A reader thread takes requests and
answers pings itself, so a ping proves the process is alive while a sentence
is being synthesised, and a cancel lands mid-sentence: Piper stops at its next
chunk and the requests queued behind are skipped.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol

import numpy as np

from livegen.models.cascade import assets, wire

#: Output rate of every engine, after resampling: the wire rate of the Realtime API.
SAMPLE_RATE = 24_000


class Engine(Protocol):
    name: str

    def speak(self, text: str, voice: str, speed: float, is_cancelled: Callable[[], bool]) -> np.ndarray:
        """Float samples in [-1, 1] at ``SAMPLE_RATE``; may stop early once ``is_cancelled()``."""
        ...


class Piper:
    """Piper with the joe voice; one ONNX session, ``threads`` intra-op threads."""

    name = "piper"

    def __init__(self, threads: int) -> None:
        import onnxruntime
        from piper import PiperVoice
        from piper.config import PiperConfig

        model_path, config_path = assets.piper_voice()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(
            str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        import json

        config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
        self._voice = PiperVoice(config=config, session=session)
        self._rate = config.sample_rate

    def speak(self, text: str, voice: str, speed: float, is_cancelled: Callable[[], bool]) -> np.ndarray:
        from piper.config import SynthesisConfig

        config = SynthesisConfig(length_scale=1.0 / speed)
        pieces = []
        for chunk in self._voice.synthesize(text, config):  # a chunk per phonemised sentence
            pieces.append(chunk.audio_float_array)
            if is_cancelled():
                break
        audio = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
        return _resample(audio, self._rate)


class Espeak:
    """libespeak-ng from espeakng-loader through ctypes: robotic, but instant."""

    name = "espeak"
    _AUDIO_OUTPUT_SYNCHRONOUS = 2
    _POS_CHARACTER = 1
    _CHARS_UTF8 = 1
    _RATE = 1
    _CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)

    def __init__(self) -> None:
        import espeakng_loader

        self._lib = ctypes.CDLL(espeakng_loader.get_library_path())
        data_parent = str(Path(espeakng_loader.get_data_path()).parent).encode()
        self._rate = self._lib.espeak_Initialize(self._AUDIO_OUTPUT_SYNCHRONOUS, 0, data_parent, 0)
        if self._rate <= 0:
            raise RuntimeError(f"espeak_Initialize failed with {self._rate}")
        self._samples: list[bytes] = []
        self._callback = self._CALLBACK(self._collect)  # kept alive: C holds the pointer
        self._lib.espeak_SetSynthCallback(self._callback)

    def _collect(self, wav: Any, num_samples: int, events: Any) -> int:
        if wav and num_samples > 0:
            self._samples.append(ctypes.string_at(wav, num_samples * 2))
        return 0

    def speak(self, text: str, voice: str, speed: float, is_cancelled: Callable[[], bool]) -> np.ndarray:
        pcm = np.frombuffer(self._afresh(text, voice, speed), np.int16).astype(np.float32) / 32768.0
        return _resample(pcm, self._rate)

    def _afresh(self, text: str, voice: str, speed: float) -> bytes:
        """PCM16 from a child forked from the state right after ``espeak_Initialize``.

        espeak-ng carries synthesis state from one utterance into the next, and neither a new
        seed nor a re-initialisation resets it: a sentence came out differently after others,
        and Whisper heard "kitchen lights" one time and "kitchen light sleeves" another. This
        process never synthesises itself, so the same text and voice give the same audio every
        time, whatever was spoken before (tests and benchmark sets repeat). A fork costs ~10 ms.
        """
        if not hasattr(os, "fork"):
            return self._synthesise(text, voice, speed)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: synthesise, hand the samples over, exit without cleanup
            self._child(read_end, write_end, text, voice, speed)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            pcm = pipe.read()
        _, status = os.waitpid(pid, 0)
        if status != 0:
            raise ValueError(pcm.decode(errors="replace") or f"espeak-ng failed in voice {voice!r}")
        return pcm

    def _child(self, read_end: int, write_end: int, text: str, voice: str, speed: float) -> None:
        """Write the samples (or, exiting 1, the error's message) and exit whatever happens: a
        child that returned would run the worker's loop as a second reader of its requests."""
        status = 1
        try:
            os.close(read_end)
            with os.fdopen(write_end, "wb") as out:
                try:
                    out.write(self._synthesise(text, voice, speed))
                    status = 0
                except Exception as exc:  # the parent raises it: the message goes instead
                    out.write(str(exc).encode())
        finally:
            os._exit(status)

    def _synthesise(self, text: str, voice: str, speed: float) -> bytes:
        if self._lib.espeak_SetVoiceByName((voice or "en-us").encode()) != 0:
            raise ValueError(f"espeak-ng has no voice {voice!r}")
        self._lib.espeak_SetParameter(self._RATE, int(175 * speed), 0)
        data = text.encode()
        self._samples = []
        flags = self._CHARS_UTF8
        self._lib.espeak_Synth(data, len(data) + 1, 0, self._POS_CHARACTER, 0, flags, None, None)
        self._lib.espeak_Synchronize()
        return b"".join(self._samples)


def _resample(audio: np.ndarray, rate: int) -> np.ndarray:
    if rate == SAMPLE_RATE or audio.size == 0:
        return audio.astype(np.float32)
    import soxr

    return np.asarray(soxr.resample(audio, rate, SAMPLE_RATE), np.float32)


def _to_pcm16(audio: np.ndarray) -> bytes:
    pcm: bytes = (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()
    return pcm


class Server:
    """Reads requests and answers pings on one thread, synthesises on the main thread, in order."""

    def __init__(self, engines: dict[str, Engine], requests: IO[bytes], replies: IO[bytes]) -> None:
        self._engines = engines
        self._requests = requests
        self._replies = replies
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._cancelled: set[int] = set()
        self._lock = threading.Lock()
        #: Both threads write replies; a frame must go out whole.
        self._write_lock = threading.Lock()

    def _reply(self, header: dict[str, Any], payload: bytes = b"") -> None:
        with self._write_lock:
            wire.write_frame(self._replies, header, payload)

    def run(self) -> None:
        threading.Thread(target=self._read, name="tts-requests", daemon=True).start()
        while (request := self._queue.get()) is not None:
            self._answer(request)

    def _read(self) -> None:
        try:
            while True:
                header, _ = wire.read_frame(self._requests)
                if header.get("op") == "cancel":
                    with self._lock:
                        self._cancelled.add(int(header["id"]))
                elif header.get("op") == "ping":
                    self._reply({"id": int(header["id"]), "status": "pong"})
                elif header.get("op") == "speak":
                    self._queue.put(header)
        except wire.FrameError:
            pass
        self._queue.put(None)

    def _answer(self, request: dict[str, Any]) -> None:
        request_id = int(request["id"])
        if self._is_cancelled(request_id, forget=True):
            self._reply({"id": request_id, "status": "cancelled"})
            return
        engine = self._engines.get(str(request.get("engine"))) or next(iter(self._engines.values()))
        text, voice = str(request["text"]), str(request.get("voice", ""))
        try:
            audio = engine.speak(text, voice, _speed(request), lambda: self._is_cancelled(request_id))
        except Exception as exc:  # one bad sentence must not end the worker
            self._reply({"id": request_id, "status": "error", "error": repr(exc)})
            return
        if self._is_cancelled(request_id, forget=True):
            self._reply({"id": request_id, "status": "cancelled"})
            return
        self._reply({"id": request_id, "status": "ok", "engine": engine.name}, _to_pcm16(audio))

    def _is_cancelled(self, request_id: int, forget: bool = False) -> bool:
        with self._lock:
            is_cancelled = request_id in self._cancelled
            if forget:  # ids only grow: a cancel that came too late for an earlier id is moot
                self._cancelled = {i for i in self._cancelled if i > request_id}
            return is_cancelled


def _speed(request: dict[str, Any]) -> float:
    return min(max(float(request.get("speed") or 1.0), 0.25), 4.0)


def load_engines(names: list[str], threads: int) -> tuple[dict[str, Engine], dict[str, str]]:
    """The engines that loaded, in preference order, and why the others did not."""
    makers: dict[str, Callable[[], Engine]] = {"piper": lambda: Piper(threads), "espeak": Espeak}
    engines: dict[str, Engine] = {}
    errors: dict[str, str] = {}
    for name in names:
        try:
            engines[name] = makers[name]()
        except Exception as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"
    return engines, errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="piper,espeak", help="Engines to load, preferred first.")
    parser.add_argument("--threads", type=int, default=1, help="ONNX intra-op threads for Piper.")
    args = parser.parse_args(argv)
    # A Ctrl-C at the terminal reaches the whole process group; the supervisor ends this worker
    # by closing its input (or kills it), so it does not die mid-frame with a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Frames go to a private copy of stdout; fd 1 itself points at stderr, so a
    # library that prints cannot corrupt the frame stream.
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    engines, errors = load_engines(args.engines.split(","), args.threads)
    hello = {"op": "ready", "engines": list(engines), "errors": errors, "sample_rate": SAMPLE_RATE}
    wire.write_frame(replies, hello)
    if not engines:
        return 1
    Server(engines, sys.stdin.buffer, replies).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
