"""How a cascade stream says an answer: its pieces' text and audio in order, paced, with a spoken
preamble first when the answer is slow (``preambles``).

A mixin of ``answering.Answering`` (given the stream's outputs, speech workers and barge-in gate),
apart so that the answering module stays about what is answered, this one about how it is said.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from typing import Any

from livegen import tasks
from livegen.models.cascade import barge_in, preambles, remote_tts, replies, speaking, tts
from livegen.models.cascade.speech_jobs import Speech
from livegen.models.voice import OutputKind


class Voicing:
    _emit: Callable[..., None]
    _spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]]
    _say: replies.Speak
    _gate: barge_in.Gate

    async def _speak(
        self,
        epoch: int,
        rid: str,
        answer: replies.Answer,
        wants_audio: bool,
        voice: str,
        preamble: str | None = None,
    ) -> str:
        """Text and audio of each piece in order, the next piece synthesised meanwhile; the text said.
        A ``preamble`` is spoken first, as its own item, if the first piece is slow (``preambles``)."""
        queue: asyncio.Queue[replies.Piece | None] = asyncio.Queue(1)
        pacing = speaking.Pacing()
        synthesis = speaking.synthesise(answer.pieces(), wants_audio, voice, queue, pacing, self._say)
        producer = self._spawn(synthesis)
        said: list[str] = []
        loop = asyncio.get_running_loop()
        first = self._spawn(queue.get())
        # The preamble's audio is made while the answer's first words are awaited, so that it is
        # ready when they are late (a short phrase; dropped when they are not).
        ready = self._say(preamble, voice) if preamble is not None and wants_audio else None
        try:
            if preamble is not None and not (await asyncio.wait({first}, timeout=preambles.AFTER_S))[0]:
                await self._preamble(epoch, rid, preamble, ready, pacing)
                ready = None
            item = await first
            while item is not None:
                text, audio = item
                delta = text if not said else f" {text}"
                said.append(delta)
                self._emit(OutputKind.TEXT_DELTA, epoch, response_id=rid, text=delta)
                answer.said.set()
                if audio is not None:
                    pacing.add(loop.time(), await self._emit_audio(epoch, rid, text, audio))
                    self._gate.playing(pacing.started + pacing.emitted_s)
                item = await queue.get()
            await producer  # re-raises its error, if any
        finally:
            if ready is not None:
                ready.cancel()
            await tasks.cancelled(first, producer)  # ended here: nothing of this answer goes on
            while not queue.empty():
                if (item := queue.get_nowait()) is not None and item[1] is not None:
                    item[1].cancel()
        return "".join(said)

    async def _preamble(
        self,
        epoch: int,
        rid: str,
        words: str,
        audio: concurrent.futures.Future[Speech] | None,
        pacing: speaking.Pacing,
    ) -> None:
        """The preamble, a ``commentary`` item of its own; what follows is the ``final_answer``."""
        self._emit(OutputKind.PHASE, epoch, response_id=rid, text="commentary")
        self._emit(OutputKind.TEXT_DELTA, epoch, response_id=rid, text=words)
        if audio is not None:
            seconds = await self._emit_audio(epoch, rid, words, audio)
            pacing.add(asyncio.get_running_loop().time(), seconds)
            self._gate.playing(pacing.started + pacing.emitted_s)
        self._emit(OutputKind.PHASE, epoch, response_id=rid, text="final_answer")

    async def _emit_audio(
        self, epoch: int, rid: str, text: str, audio: concurrent.futures.Future[Speech]
    ) -> float:
        """Emit one piece's audio; its length in seconds."""
        if isinstance(audio, remote_tts.StreamedSpeech):  # a remote voice's: each chunk as it comes
            size = 0
            async for pcm in audio.chunks():
                size += len(pcm)
                for chunk in speaking.audio_deltas(pcm):
                    self._emit(OutputKind.AUDIO_DELTA, epoch, response_id=rid, audio=chunk)
            return size / 2 / tts.SAMPLE_RATE
        speech = await speaking.speech_of(audio, text, self._say)
        for chunk in speaking.audio_deltas(speech.pcm):
            self._emit(OutputKind.AUDIO_DELTA, epoch, response_id=rid, audio=chunk)
        return len(speech.pcm) / 2 / tts.SAMPLE_RATE
