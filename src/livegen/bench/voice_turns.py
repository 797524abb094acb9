"""Spoken turns for ``livegen bench voice-model``: the user's speech, and two ways to deliver it.

Both transports play the user: speech in 20 ms chunks at the pace of
speech, then the silence a live microphone keeps sending, and they time what
comes back on the benchmark's side:

- ``ServerTurns``: a real server (the same app as ``livegen serve``) on a
  loopback port, a WebSocket client speaking the Realtime protocol under
  server VAD; the times are what a client sees.
- ``ContractTurns``: straight into a ``VoiceStream``, doing what the session
  runtime does under server VAD (commit and respond at speech stop, advance
  the epoch and cancel at speech start); the times are the model's alone.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from livegen.models.voice import OutputKind, ResponseRequest, StreamConfig, TurnDetection, VoiceOutput

USER_VOICE = "espeak:en-us+m2"
CHUNK_MS = 20
MODEL_RATE = 16_000
WIRE_RATE = 24_000
_AUDIO_DELTAS = ("response.output_audio.delta", "response.audio.delta")


@dataclass(frozen=True)
class Utterance:
    text: str
    #: PCM16 with leading silence, ending where the speech ends: at the model's rate and the wire's.
    pcm16: bytes
    pcm24: bytes
    seconds: float


@dataclass
class TurnResult:
    prompt: str
    transcript: str
    answer: str
    #: From the end of the user's speech to the first audio of the answer.
    first_audio_ms: float | None
    #: From the end of the user's speech to the speech stop (the silence window plus the detector's lag).
    speech_stopped_ms: float | None = None


@dataclass(frozen=True)
class BargeIn:
    #: From ``speech_started`` to the last audio of the interrupted answer (0 if none came after).
    cut_ms: float
    #: From the start of the interrupting speech to ``speech_started`` (the detector's part).
    detect_ms: float


class Turns(Protocol):
    transport: str

    async def turn(self, utterance: Utterance) -> TurnResult: ...

    async def barge_in(self, question: Utterance, interruption: Utterance) -> BargeIn | None: ...

    def close(self) -> None: ...


def synthesise(model: Any, text: str, lead_s: float = 0.4) -> Utterance:
    """``text`` in the user's voice, trimmed to end where the speech ends."""
    import soxr

    pcm = model.speak(text, USER_VOICE).result(timeout=120).pcm
    samples = np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0
    loud = np.flatnonzero(np.abs(samples) > 0.01)
    speech = samples[: loud[-1] + 1] if loud.size else samples
    audio = np.concatenate([np.zeros(int(lead_s * WIRE_RATE), np.float32), speech])
    at_model_rate = soxr.resample(audio, WIRE_RATE, MODEL_RATE)
    return Utterance(text, _pcm16(at_model_rate), _pcm16(audio), len(audio) / WIRE_RATE)


def _lead_s(utterance: Utterance) -> float:
    """Seconds of silence before the speech in ``utterance``."""
    samples = np.frombuffer(utterance.pcm24, "<i2")
    loud = np.flatnonzero(np.abs(samples) > 327)
    return float(loud[0]) / WIRE_RATE if loud.size else 0.0


def _pcm16(samples: np.ndarray) -> bytes:
    data: bytes = (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()
    return data


async def _paced(
    pcm: bytes, rate: int, send: Callable[[bytes], Any], until: Callable[[], object] | None
) -> float:
    """Send ``pcm`` in 20 ms chunks at the pace of speech; the time its last chunk went."""
    chunk = rate * CHUNK_MS // 1000 * 2
    started = time.perf_counter()
    for index, start in enumerate(range(0, len(pcm), chunk)):
        if until is not None and until():
            break
        await asyncio.sleep(max(0.0, started + index * CHUNK_MS / 1000 - time.perf_counter()))
        await send(pcm[start : start + chunk])
    return time.perf_counter()


# -- through the real server ---------------------------------------------------------------------


class ServerTurns:
    transport = "server"

    def __init__(self, silence_ms: int, ws_url: str | None = None) -> None:
        """Calls to the server at ``ws_url``, or (None) to one serving the cascade in this process."""
        from livegen.server.config import ServerConfig
        from livegen.server.thread import ServerThread

        self.silence_ms = silence_ms
        self.server: ServerThread | None = None
        if ws_url is None:
            config = ServerConfig(api_key=None, voice_model="cascade", world_model="none")
            self.server = ServerThread(config).start()
            self.server.wait_ready()
            ws_url = self.server.ws_url
        self.ws_url = ws_url

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()

    async def turn(self, utterance: Utterance, tail_s: float = 4.0) -> TurnResult:
        async with self._call() as call:
            end = await call.feed(utterance.pcm24)
            await call.feed(bytes(2 * int(tail_s * WIRE_RATE)), until=lambda: call.first("response.done"))
            rid = call.first_event("response.created", "response", "id")
            first_audio = call.first(*_AUDIO_DELTAS, response_id=rid)
            stopped = call.first("input_audio_buffer.speech_stopped")
            return TurnResult(
                utterance.text,
                " ".join(
                    str(e["transcript"])
                    for _, e in call.of("conversation.item.input_audio_transcription.completed")
                ),
                "".join(str(e["delta"]) for _, e in call.of("response.output_audio_transcript.delta")),
                None if first_audio is None else (first_audio - end) * 1000,
                None if stopped is None else (stopped - end) * 1000,
            )

    async def barge_in(self, question: Utterance, interruption: Utterance) -> BargeIn | None:
        """The user talks over the answer: how fast the old answer's audio stops coming."""
        async with self._call() as call:
            await call.feed(question.pcm24)
            await call.feed(bytes(2 * 6 * WIRE_RATE), until=lambda: call.first(*_AUDIO_DELTAS))
            old = call.first_event("response.created", "response", "id")
            await call.feed(bytes(WIRE_RATE))  # half a second of the answer plays
            mark = len(call.log)
            talking = time.perf_counter() + _lead_s(interruption)
            await call.feed(interruption.pcm24 + bytes(3 * WIRE_RATE))
            started = call.first("input_audio_buffer.speech_started", after=mark)
            old_audio = [
                at for at, e in call.log if e["type"] in _AUDIO_DELTAS and e.get("response_id") == old
            ]
            if started is None or not old_audio:
                return None
            return BargeIn(max(0.0, (max(old_audio) - started) * 1000), (started - talking) * 1000)

    @contextlib.asynccontextmanager
    async def _call(self) -> AsyncIterator[_ServerCall]:
        import websockets

        url = f"{self.ws_url}/v1/realtime?model=cascade"
        async with websockets.connect(url, max_size=None) as socket:
            call = _ServerCall(socket)
            try:
                await call.configure(self.silence_ms)
                yield call
            finally:
                await call.close()


class _ServerCall:
    def __init__(self, socket: Any) -> None:
        self.socket = socket
        self.log: list[tuple[float, dict[str, Any]]] = []
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(Exception):
            async for message in self.socket:
                self.log.append((time.perf_counter(), json.loads(message)))

    async def configure(self, silence_ms: int) -> None:
        detection = {"type": "server_vad", "silence_duration_ms": silence_ms}
        session = {"type": "realtime", "audio": {"input": {"turn_detection": detection}}}
        await self.socket.send(json.dumps({"type": "session.update", "session": session}))
        for _ in range(500):
            if self.first("session.updated"):
                return
            await asyncio.sleep(0.01)
        raise RuntimeError(f"no session.updated; got {[e['type'] for _, e in self.log]}")

    async def feed(self, pcm24: bytes, until: Callable[[], object] | None = None) -> float:
        async def send(chunk: bytes) -> None:
            audio = base64.b64encode(chunk).decode()
            await self.socket.send(json.dumps({"type": "input_audio_buffer.append", "audio": audio}))

        return await _paced(pcm24, WIRE_RATE, send, until)

    def of(self, *kinds: str, after: int = 0) -> list[tuple[float, dict[str, Any]]]:
        return [(at, e) for at, e in self.log[after:] if e["type"] in kinds]

    def first(self, *kinds: str, after: int = 0, response_id: str | None = None) -> float | None:
        return next(
            (at for at, e in self.of(*kinds, after=after) if response_id in (None, e.get("response_id"))),
            None,
        )

    def first_event(self, kind: str, *path: str) -> Any:
        for _, event in self.of(kind):
            value: Any = event
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            return value
        return None

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader


# -- through the voice-model contract ----------------------------------------------------------


class ContractTurns:
    transport = "contract"

    def __init__(self, model: Any, silence_ms: int) -> None:
        self.model = model
        self.config = StreamConfig(turn_detection=TurnDetection(silence_duration_ms=silence_ms))
        self._num_sessions = 0

    def close(self) -> None:
        pass

    async def turn(self, utterance: Utterance, tail_s: float = 4.0) -> TurnResult:
        session = await self._open()
        try:
            end_of_speech = await session.feed(utterance.pcm16)
            await session.feed(bytes(2 * int(tail_s * MODEL_RATE)), until=lambda: session.is_done("resp_1"))
            first = session.first(OutputKind.AUDIO_DELTA, "resp_1")
            stopped = session.first(OutputKind.SPEECH_STOPPED, None)
            return TurnResult(
                utterance.text,
                session.transcript(),
                session.text("resp_1"),
                None if first is None else (first - end_of_speech) * 1000,
                None if stopped is None else (stopped - end_of_speech) * 1000,
            )
        finally:
            await session.close()

    async def barge_in(self, question: Utterance, interruption: Utterance) -> BargeIn | None:
        """The user talks over the answer: how fast the model stops producing the old one."""
        session = await self._open()
        try:
            await session.feed(question.pcm16)
            until_audio = lambda: session.first(OutputKind.AUDIO_DELTA, "resp_1")  # noqa: E731
            await session.feed(bytes(2 * 6 * MODEL_RATE), until=until_audio)
            await session.feed(bytes(MODEL_RATE))
            talking = time.perf_counter() + _lead_s(interruption)
            await session.feed(interruption.pcm16 + bytes(3 * MODEL_RATE))
            old_audio = [at for at, o in session.log if o.kind is OutputKind.AUDIO_DELTA and o.epoch == 1]
            if session.barged_at is None or not old_audio:
                return None
            cut_ms = max(0.0, (max(old_audio) - session.barged_at) * 1000)
            return BargeIn(cut_ms, (session.barged_at - talking) * 1000)
        finally:
            await session.close()

    async def _open(self) -> _ContractSession:
        self._num_sessions += 1
        stream = await self.model.open(f"bench-{self._num_sessions}", self.config)
        return _ContractSession(stream)


class _ContractSession:
    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.epoch = 1
        self.log: list[tuple[float, VoiceOutput]] = []
        self.barged_at: float | None = None
        self._num_responses = 0
        self._pump = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for output in self.stream.outputs():
            self.log.append((time.perf_counter(), output))
            if output.epoch != self.epoch:
                continue  # the fence
            if output.kind is OutputKind.SPEECH_STARTED and self._is_answering():
                self.barged_at = time.perf_counter()
                self.epoch += 1
                await self.stream.cancel(self.epoch)
            elif output.kind is OutputKind.SPEECH_STOPPED:
                self._num_responses += 1
                await self.stream.commit(self.epoch, f"item_{self._num_responses}")
                await self.stream.respond(self.epoch, ResponseRequest(f"resp_{self._num_responses}"))

    def _is_answering(self) -> bool:
        return self._num_responses > 0 and not self.is_done(f"resp_{self._num_responses}")

    async def feed(self, pcm16: bytes, until: Callable[[], object] | None = None) -> float:
        async def send(chunk: bytes) -> None:
            await self.stream.append(self.epoch, chunk)

        return await _paced(pcm16, MODEL_RATE, send, until)

    def first(self, kind: OutputKind, response_id: str | None) -> float | None:
        return next((at for at, o in self.log if o.kind is kind and o.response_id == response_id), None)

    def is_done(self, response_id: str) -> bool:
        return self.first(OutputKind.RESPONSE_DONE, response_id) is not None

    def transcript(self) -> str:
        return " ".join(o.text for _, o in self.log if o.kind is OutputKind.TRANSCRIPT_DONE)

    def text(self, response_id: str) -> str:
        return "".join(
            o.text for _, o in self.log if o.kind is OutputKind.TEXT_DELTA and o.response_id == response_id
        )

    async def close(self) -> None:
        await self.stream.aclose()
        await self._pump
