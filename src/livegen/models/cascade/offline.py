"""Whole clips outside any session: a clip's transcript piece by piece, a text's speech sentence by sentence.

The server's ``/v1/audio/transcriptions`` and ``/v1/audio/speech`` (``server/audio/routes.py``) come
here through ``CascadeModel``'s ``ClipAudio`` methods. Nothing new is loaded: a clip is
recognised through the model's batcher (``CascadeModel.transcribe``, as a session's final, so
it takes its turn with the sessions' decodes) and spoken by the shared speech workers, which
serve each owner one part at a time, round-robin (``tts.Pool``), so a long text never holds
them all.

Whisper hears at most 30 s at once, so a longer clip is cut into pieces of at most 30 s, each
cut at the quietest moment of the few seconds before the limit (a pause between words, not
the middle of one). At most ``LOOKAHEAD`` pieces (or sentences) are queued at a time: the
first transcript (or audio) is not held back behind the rest, a client that goes away leaves
little work behind, and the sessions' own decodes never wait behind a whole long clip.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import re
from collections import deque
from collections.abc import AsyncGenerator, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from livegen import tasks
from livegen.models.cascade import asr, sentences
from livegen.models.voice import ClipSegment

if TYPE_CHECKING:
    import concurrent.futures
    from collections.abc import Hashable

    from livegen.models.cascade.speech_jobs import Speech


class CascadeModel(Protocol):
    """The cascade model as a whole clip uses it (``model.CascadeModel``, whose ``ClipAudio``
    methods call this module: declared here so that the two do not import each other)."""

    async def transcribe(self, audio: np.ndarray, options: asr.Options | None = None) -> str: ...
    async def logprobs(self, audio: np.ndarray, text: str, options: asr.Options) -> list[asr.Logprob]: ...
    def recognizer_for(self, name: str) -> asr.Recognizer: ...
    def speak(
        self, text: str, voice: str = "", owner: Hashable | None = None, speed: float = 1.0
    ) -> concurrent.futures.Future[Speech]: ...


#: Most audio Whisper hears at once, in seconds.
PIECE_S = asr.WINDOWS_S[-1]
#: A long clip is cut at the quietest 100 ms of this many seconds before each 30 s limit.
_CUT_SEARCH_S = 5.0
_CUT_FRAME_S = 0.1
#: Whisper's encoder positions per second of audio (1500 for its 30 s window).
_ENCODER_POSITIONS_PER_S = 50
#: Pieces being recognised, or sentences being synthesised, at once for one request.
LOOKAHEAD = 2
#: The model's own voice names beside the OpenAI ones the server maps to the default voice:
#: Piper's voice, espeak-ng's default, and an espeak-ng voice by name ("espeak:en-gb+f3").
PIPER_VOICE = "joe"
_ESPEAK = re.compile(r"espeak(:[A-Za-z0-9_+-]{1,40})?")


def accepts_voice(voice: str) -> bool:
    return voice == PIPER_VOICE or _ESPEAK.fullmatch(voice) is not None


def pieces(audio: np.ndarray, rate: int = asr.SAMPLE_RATE) -> list[tuple[int, int]]:
    """(start, end) sample ranges of at most ``PIECE_S`` seconds covering ``audio``, cut at quiet moments."""
    limit, frame = PIECE_S * rate, int(_CUT_FRAME_S * rate)
    ranges: list[tuple[int, int]] = []
    start = 0
    while len(audio) - start > limit:
        search = audio[start + limit - int(_CUT_SEARCH_S * rate) : start + limit]
        frames = search[: len(search) // frame * frame].reshape(-1, frame)
        quietest = int(np.argmin(np.square(frames).mean(axis=1)))
        end = start + limit - len(search) + quietest * frame + frame // 2
        ranges.append((start, end))
        start = end
    ranges.append((start, len(audio)))
    return ranges


async def transcribe_clip(
    model: CascadeModel,
    pcm: bytes,
    name: str = "",
    language: str = "",
    prompt: str = "",
    logprobs: bool = False,
) -> AsyncGenerator[ClipSegment, None]:
    """Each piece's transcript in order, as soon as it and those before it are decoded.

    ``name`` is one of ``asr.CHOICES`` (another means the server's recogniser); empty pieces
    (silence) yield nothing. With ``logprobs``, each piece's tokens are scored against its audio
    (through the batcher too). Conversions and token counts run in a thread: a long clip's
    arrays would stall the event loop.
    """
    audio, spans = await asyncio.to_thread(_prepared, pcm)
    options = asr.Options(model=name, language=language, prompt=prompt)
    ranges = iter(spans)
    queued: deque[tuple[tuple[int, int], asyncio.Future[str]]] = deque()
    decodes = tasks.TaskSet()

    def queue_next() -> None:
        if (span := next(ranges, None)) is not None:
            queued.append((span, decodes.spawn(model.transcribe(audio[span[0] : span[1]], options))))

    decoding: asyncio.Future[str] | None = None
    try:
        for _ in range(LOOKAHEAD):
            queue_next()
        while queued:
            (start, end), decoding = queued.popleft()
            queue_next()
            text = await decoding
            if not text:
                continue
            scored = await model.logprobs(audio[start:end], text, options) if logprobs else None
            segment = await asyncio.to_thread(_segment, model, options, start, end, text)
            yield (
                segment if scored is None else replace(segment, logprobs=tuple(lp.to_wire() for lp in scored))
            )
    finally:
        # The decodes are this generator's: ended, and awaited, however it ends.
        await tasks.cancelled(*(task for _, task in queued), *([decoding] if decoding else []))


def _prepared(pcm: bytes) -> tuple[np.ndarray, list[tuple[int, int]]]:
    audio = np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0
    return audio, pieces(audio)


def _segment(model: CascadeModel, options: asr.Options, start: int, end: int, text: str) -> ClipSegment:
    """The piece's transcript and its usage: Whisper's encoder positions (50 a second of audio
    heard), the prompt's tokens, the text's tokens (counted by the recogniser's tokenizer)."""
    tokenizer = model.recognizer_for(options.model)._tokenizer(options.language)
    prompt = (
        len(tokenizer.encode(" " + options.prompt.strip())[-asr.MAX_PROMPT_TOKENS :])
        if options.prompt.strip()
        else 0
    )
    output = len(tokenizer.encode(" " + text))
    audio_tokens = math.ceil((end - start) / asr.SAMPLE_RATE * _ENCODER_POSITIONS_PER_S)
    return ClipSegment(start / asr.SAMPLE_RATE, end / asr.SAMPLE_RATE, text, audio_tokens, prompt, output)


async def speak_text(
    model: CascadeModel, text: str, voice: str = "", speed: float = 1.0
) -> AsyncGenerator[bytes, None]:
    """PCM16 at 24 kHz, a piece (the first clause, then sentences) at a time, in order.

    All pieces belong to one owner of the speech pool, so a long text shares the workers fairly
    with the sessions; closing the iterator early cancels what is queued.
    """
    owner = object()
    texts = _pieces(text)
    queued: deque[concurrent.futures.Future[Any]] = deque()

    def queue_next() -> None:
        if (piece := next(texts, None)) is not None:
            queued.append(model.speak(piece, voice, owner=owner, speed=speed))

    try:
        for _ in range(LOOKAHEAD):
            queue_next()
        while queued:
            speaking = queued.popleft()
            queue_next()
            speech = await asyncio.wrap_future(speaking)
            yield speech.pcm
    finally:
        for speaking in queued:
            speaking.cancel()


def _pieces(text: str) -> Iterator[str]:
    """The pieces to speak: the first cut early (at a clause) so the first audio comes soon."""
    return iter([piece for piece in sentences.split(text) if piece.strip()] or [text])
