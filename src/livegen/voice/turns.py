"""Turn policy of a voice session: speech edges commit turns and barge in; the idle timeout.

A mixin of ``voice.Session`` (like ``output.py``), so that the session core
stays one object with one writer while its parts stay readable apart. Server
VAD (the model's own detector, or ``vad.py``) reports speech edges: speech
starting interrupts a response that is still speaking (barge-in, through the
fence); speech stopping commits the turn and, with ``create_response``, asks
for an answer. ``idle_timeout_ms`` answers a silent user: it is timed from
when the last answer finished playing, and fires once per answer.
"""

from __future__ import annotations

from typing import Any

from livegen.errors import CapacityExceeded, RemoteProtocolError
from livegen.voice.chain import Effect
from livegen.voice.config import Config
from livegen.voice.output import Speaker


class TurnTaker(Speaker):
    """Turn handling of ``voice.Session``; the state it reads is owned and set up there."""

    # Set by Session.__init__.
    config: Config
    buffer_bytes: int
    input_ms: float
    _vad_item_id: str | None
    _in_speech: bool
    _idle_from: float | None
    _idle_input_ms: float

    def _commit(self, item_id: str, now: float) -> list[Effect]:
        raise NotImplementedError

    def _create_response(
        self,
        now: float,
        instructions: str,
        modalities: tuple[str, ...],
        metadata: dict[str, str] | None = None,
    ) -> list[Effect]:
        raise NotImplementedError

    def _interrupt(self, now: float, reason: str) -> list[Effect]:
        raise NotImplementedError

    def reject(self, error: RemoteProtocolError) -> list[Effect]:
        raise NotImplementedError

    def _speech_started(self, audio_ms: float, now: float) -> list[Effect]:
        vad = self.config.turn_detection
        if vad is None:
            return []
        self._in_speech = True
        self._idle_from = None
        self._vad_item_id = self._vad_item_id or self.ids("item")
        start = max(0, round(audio_ms) - vad.prefix_padding_ms)
        effects: list[Effect] = [
            self._event("input_audio_buffer.speech_started", audio_start_ms=start, item_id=self._vad_item_id)
        ]
        if vad.interrupt_response and self._is_speaking(now):
            effects += self._interrupt(now, "turn_detected")
        return effects

    def _speech_stopped(self, audio_ms: float, now: float) -> list[Effect]:
        vad = self.config.turn_detection
        if vad is None:
            return []
        self._in_speech = False
        item_id = self._vad_item_id or self.ids("item")
        effects: list[Effect] = [
            self._event("input_audio_buffer.speech_stopped", audio_end_ms=round(audio_ms), item_id=item_id)
        ]
        if self.buffer_bytes == 0:
            return effects
        try:
            effects += self._commit(item_id, now)
        except CapacityExceeded as error:
            return [*effects, *self.reject(error)]
        if vad.create_response and self.response is None and not self.config.is_transcription:
            effects += self._create_response(now, self.config.instructions, self.config.output_modalities)
        return effects

    def _end_response(self, now: float, status: str, details: dict[str, Any] | None) -> list[Effect]:
        response = self.response
        effects = super()._end_response(now, status, details)
        if response is not None:
            # The idle clock starts when the user has heard the whole answer.
            playback = response.playback
            played_until = now
            if playback is not None and playback.started_at is not None:
                played_until = max(now, playback.started_at + playback.sent_ms / 1000.0)
            self._idle_from, self._idle_input_ms = played_until, self.input_ms
        return effects

    def _idle_deadline(self) -> float | None:
        vad = self.config.turn_detection
        if vad is None or vad.idle_timeout_ms is None or self._idle_from is None:
            return None
        if self.config.is_transcription:  # the idle timeout answers, and a transcription session never does
            return None
        if self.response is not None or self._in_speech or self.is_closed:
            return None
        return self._idle_from + vad.idle_timeout_ms / 1000.0

    def next_deadline(self) -> float | None:
        deadlines = [d for d in (super().next_deadline(), self._idle_deadline()) if d is not None]
        return min(deadlines, default=None)

    def tick(self, now: float) -> list[Effect]:
        effects = super().tick(now)
        deadline = self._idle_deadline()
        if deadline is not None and now >= deadline:
            effects += self._idle_timeout(now)
        return effects

    def _idle_timeout(self, now: float) -> list[Effect]:
        """Nobody spoke for ``idle_timeout_ms`` after the answer: commit what came in, and answer."""
        self._idle_from = None
        item_id = self._vad_item_id or self.ids("item")
        effects: list[Effect] = [
            self._event(
                "input_audio_buffer.timeout_triggered",
                audio_start_ms=round(self._idle_input_ms),
                audio_end_ms=round(self.input_ms),
                item_id=item_id,
            )
        ]
        if self.buffer_bytes:
            try:
                effects += self._commit(item_id, now)
            except CapacityExceeded as error:
                return [*effects, *self.reject(error)]
        return effects + self._create_response(now, self.config.instructions, self.config.output_modalities)

    def _is_speaking(self, now: float) -> bool:
        """A response is running, or audio already sent is still playing at the client."""
        return self.response is not None or any(p.is_playing(now) for p in self.playbacks.values())
