"""A remote voice: any OpenAI-compatible ``POST /v1/audio/speech`` endpoint, streamed.

``--tts-base-url`` sends each piece of an answer (a clause, a sentence) to
the endpoint as ``{"model", "input", "voice", "response_format": "pcm"}``
and reads the answer as it arrives: OpenAI's ``pcm`` is 24 kHz mono PCM16,
the cascade's own rate. A server that answers ``wav`` instead (a streamed
WAV's sizes may be 0 or 0xFFFFFFFF) has its header read and dropped; any
other rate or layout is refused. Each piece's audio goes to the session as
soon as it comes (``StreamedSpeech.chunks``), so the first audio is not held
back by the whole sentence.

A stage that cannot be reached, answers an error status, something that is
not audio, too much of it, or nothing within ``timeout_s`` (to the first byte,
between two chunks, and in all ``timeout_s`` plus ``SECONDS_PER_CHAR`` of the
text) fails the piece with ``TtsUnavailable``: the response ends ``failed``
with ``tts_unavailable``, and nothing else waits on it. The engine's GPL parts
stay where they were: a remote voice runs in its own server.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import struct
from collections.abc import AsyncIterator

from livegen import tasks
from livegen.errors import TtsUnavailable
from livegen.models.cascade import remote, tts

#: Most seconds of audio one piece may bring; more is garbage (a piece is a sentence).
MAX_PIECE_S = 120
#: A piece may take this long per character of its text, beyond ``timeout_s``, to arrive in full.
SECONDS_PER_CHAR = 0.2
_AUDIO_TYPES = (
    "audio/pcm",
    "audio/l16",
    "application/octet-stream",
    "audio/wav",
    "audio/x-wav",
    "audio/wave",
)
#: The voice asked for when the session names none of its own.
DEFAULT_VOICE = "alloy"


class StreamedSpeech(concurrent.futures.Future[tts.Speech]):
    """One piece's speech from a remote voice: its chunks as they arrive (``chunks``), and the
    whole piece as the future's result once it is all there. Cancelling stops the request."""

    def __init__(self) -> None:
        super().__init__()
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._pcm = bytearray()
        self._task: asyncio.Task[None] | None = None
        self.add_done_callback(self._stop)

    def push(self, pcm: bytes) -> None:
        self._pcm += pcm
        self._queue.put_nowait(pcm)

    def finish(self) -> None:
        if not self.done():
            self.set_result(tts.Speech(bytes(self._pcm), "remote"))
        self._queue.put_nowait(None)

    def fail(self, error: Exception) -> None:
        if not self.done():
            self.set_exception(error)
        self._queue.put_nowait(None)

    async def chunks(self) -> AsyncIterator[bytes]:
        """PCM16 at 24 kHz as it arrives (what is already there, joined); raises the stage's error."""
        is_over = False
        try:
            while not is_over and (chunk := await self._queue.get()) is not None:
                parts = [chunk]
                while not self._queue.empty():
                    if (more := self._queue.get_nowait()) is None:
                        is_over = True
                        break
                    parts.append(more)
                yield b"".join(parts)
        finally:
            if not self.done():
                self.cancel()  # a barge-in: the rest is not wanted
        if self.done() and not self.cancelled() and (error := self.exception()) is not None:
            raise error

    def _stop(self, _future: concurrent.futures.Future[tts.Speech]) -> None:
        if self.cancelled() and self._task is not None:
            self._task.get_loop().call_soon_threadsafe(self._task.cancel)


class RemoteVoice:
    """Speech from ``stage``'s ``/audio/speech``; ``speak`` is called on the event loop."""

    def __init__(self, stage: remote.Stage, model: str) -> None:
        self.stage = stage
        self.model = model
        #: The fetches under way: each held until it ends, and ended by ``aclose``.
        self._fetches = tasks.TaskSet()

    def speak(self, text: str, voice: str = "", speed: float = 1.0) -> StreamedSpeech:
        speech = StreamedSpeech()
        speech._task = self._fetches.spawn(self._fetch(speech, text, voice or DEFAULT_VOICE, speed))
        return speech

    async def aclose(self) -> None:
        """End the fetches still under way (their speech fails ``tts_unavailable``)."""
        await self._fetches.aclose()

    async def _fetch(self, speech: StreamedSpeech, text: str, voice: str, speed: float) -> None:
        import httpx

        stage = self.stage
        body = {"model": self.model, "input": text, "voice": voice, "response_format": "pcm", "speed": speed}
        try:
            async with asyncio.timeout(stage.timeout_s + SECONDS_PER_CHAR * len(text)):
                async with stage.client().stream("POST", "audio/speech", json=body) as response:
                    await _read(response, speech, stage.url("audio/speech"))
        except asyncio.CancelledError:
            speech.fail(TtsUnavailable("cancelled"))
            raise
        except (TimeoutError, httpx.TimeoutException):
            speech.fail(self._failed(f"the voice at {stage.url('audio/speech')} answered too slowly"))
        except httpx.HTTPError as exc:
            speech.fail(self._failed(f"cannot reach the voice at {stage.url('audio/speech')}: {exc!r}"))
        except TtsUnavailable as exc:
            speech.fail(self._failed(str(exc)))
        else:
            stage.succeeded()
            speech.finish()

    def _failed(self, reason: str) -> TtsUnavailable:
        self.stage.failed(reason)
        return TtsUnavailable(reason)


async def _read(response: object, speech: StreamedSpeech, url: str) -> None:
    """The answer's PCM into ``speech`` as it comes; raises ``TtsUnavailable`` on an error or garbage."""
    import httpx

    assert isinstance(response, httpx.Response)
    if response.status_code != 200:
        raise TtsUnavailable(
            f"the voice at {url} answered {response.status_code}: {await remote.error_text(response)}"
        )
    media = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if media and media not in _AUDIO_TYPES:
        raise TtsUnavailable(f"the voice at {url} answered {media!r}, not audio")
    decoder = PcmDecoder(is_wav=media in ("audio/wav", "audio/x-wav", "audio/wave"))
    cap = MAX_PIECE_S * tts.SAMPLE_RATE * 2
    received = 0
    async for data in response.aiter_bytes():
        pcm = decoder.feed(data)
        received += len(pcm)
        if received > cap:
            raise TtsUnavailable(f"the voice at {url} sent more than {MAX_PIECE_S} s of audio for one piece")
        if pcm:
            speech.push(pcm)
    if not received:
        raise TtsUnavailable(f"the voice at {url} sent no audio")


class PcmDecoder:
    """Bytes of a streamed answer -> whole PCM16 samples; a WAV header (``RIFF``) is read and dropped."""

    def __init__(self, is_wav: bool = False) -> None:
        self._head = bytearray()
        self._in_header = True
        self._odd = b""
        self._is_wav = is_wav

    def feed(self, data: bytes) -> bytes:
        if self._in_header:
            self._head += data
            if len(self._head) < 12 and (self._is_wav or self._head[:4] == b"RIFF"[: len(self._head)]):
                return b""
            if self._head[:4] != b"RIFF":
                if self._is_wav:
                    raise TtsUnavailable("the voice's WAV answer has no RIFF header")
                self._in_header = False
                data, self._head = bytes(self._head), bytearray()
            else:
                start = _wav_data_start(bytes(self._head))
                if start is None:
                    if len(self._head) > 4096:
                        raise TtsUnavailable("the voice's WAV answer has no data chunk in its first 4 KiB")
                    return b""
                self._in_header = False
                data, self._head = bytes(self._head[start:]), bytearray()
        data = self._odd + data
        whole = len(data) // 2 * 2
        self._odd = data[whole:]
        return data[:whole]


def _wav_data_start(head: bytes) -> int | None:
    """Where a WAV's samples start, once its header is all in ``head``; refuses other layouts."""
    position = 12
    while position + 8 <= len(head):
        chunk, size = head[position : position + 4], struct.unpack("<I", head[position + 4 : position + 8])[0]
        if chunk == b"data":
            return position + 8
        if chunk == b"fmt ":
            if position + 24 > len(head):
                return None
            fmt, channels, rate, _, _, bits = struct.unpack("<HHIIHH", head[position + 8 : position + 24])
            if (fmt, channels, rate, bits) not in (
                (1, 1, tts.SAMPLE_RATE, 16),
                (0xFFFE, 1, tts.SAMPLE_RATE, 16),
            ):
                raise TtsUnavailable(
                    f"the voice sent WAV of format {fmt}, {channels} channel(s), {rate} Hz, {bits} bits;"
                    f" livegen takes mono 16-bit PCM at {tts.SAMPLE_RATE} Hz (ask for pcm)"
                )
        position += 8 + size + (size & 1)
    return None
