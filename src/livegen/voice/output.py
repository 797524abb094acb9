"""What a voice session says: model outputs become wire events, paced audio, one terminal each.

This half of the session core (``voice/session.py`` holds the other: client
events, turn policy, the fence and the chain's reports) turns the model's
outputs of the current epoch into OpenAI's response events, holds audio back
to real time plus a lead (``tick``), and ends each response exactly once
(``_end_response``), cutting its item to what the listener heard. It is a
mixin so that both halves stay one object with one writer.
"""

from __future__ import annotations

import base64
from typing import Any

from livegen.models.voice import OutputKind, VoiceOutput
from livegen.protocol.audio import pcm_ms
from livegen.protocol.errors import MODEL_FAILED, OUTBOX_OVERFLOW, OUTPUT_OVERFLOW
from livegen.voice import usage
from livegen.voice.calls import CallLedger
from livegen.voice.chain import Attempt, AttemptState, DropOutput, Effect, Send
from livegen.voice.conversation import Conversation, Item
from livegen.voice.ledger import Playback
from livegen.voice.response import AudioChunk, Response
from livegen.voice.settings import IdFactory, Limits, ModelFacts

#: Playback ledgers kept for acks and truncation after their responses end.
MAX_PLAYBACKS = 16


class Speaker:
    """Output handling of ``voice.Session``; the state it reads is owned and set up there."""

    # Set by Session.__init__.
    model: ModelFacts
    limits: Limits
    ids: IdFactory
    epoch: int
    response: Response | None
    playbacks: dict[str, Playback]
    conversation: Conversation
    attempts: list[Attempt]
    num_stale_outputs: int
    calls: CallLedger
    #: The item the turn being spoken will become (server VAD), announced by ``speech_started``.
    _vad_item_id: str | None

    @property
    def is_closed(self) -> bool:
        raise NotImplementedError

    def _event(self, type_: str, **fields: Any) -> Send:
        raise NotImplementedError

    def _speech_started(self, audio_ms: float, now: float) -> list[Effect]:
        raise NotImplementedError

    def _speech_stopped(self, audio_ms: float, now: float) -> list[Effect]:
        raise NotImplementedError

    def _truncated(self, item_id: str, end_ms: float) -> Send:
        return self._event(
            "conversation.item.truncated", item_id=item_id, content_index=0, audio_end_ms=round(end_ms)
        )

    def _find_item(self, item_id: str) -> Item | None:
        return self.conversation.get(item_id) if item_id in self.conversation else None

    def _truncate_item(self, item: Item, end_ms: float) -> None:
        playback = self.playbacks.get(item.id)
        end_ms = min(end_ms, item.audio_ms)
        if playback is not None:
            playback.committed_ms = end_ms
            if item.text is not None:
                item.text = item.text[: playback.text_length_at(end_ms, len(item.text))]
        elif item.text is not None and item.audio_ms > 0:
            item.text = item.text[: round(len(item.text) * end_ms / item.audio_ms)]
        if end_ms < item.audio_ms:
            item.status = "incomplete"
        item.audio_ms = end_ms

    def _end_response(self, now: float, status: str, details: dict[str, Any] | None) -> list[Effect]:
        """The one ``response.done`` of the live response (nothing when none is live)."""
        response = self.response
        if response is None:
            return []
        self.response = None
        response.is_finished = True
        effects: list[Effect] = []
        for attempt in self.attempts:
            if attempt.response_id == response.id:
                attempt.state = AttemptState.CANCELLED  # we own its terminal: this is it
        self.attempts = [a for a in self.attempts if a.is_live]
        if status != "completed":
            effects.append(DropOutput(response.id))
        response.pending_audio.clear()
        if response.item is not None:
            effects += self._close_item(response, status, now)
        if status != "completed":
            self._abandon_calls(response.id)
        if response.usage is None:
            response.usage = usage.counted(response.request_words, response.outputs)
        effects.append(self._event("response.done", response=response.to_wire(status, details)))
        return effects

    def _abandon_calls(self, response_id: str) -> None:
        """The user did not let the answer that made these calls stand: their outputs are refused."""
        abandoned = set(self.calls.abandon_response(response_id))
        for item in self.conversation.items():
            if item.type == "function_call" and item.call_id in abandoned:
                item.status = "incomplete"

    def _close_item(self, response: Response, status: str, now: float) -> list[Effect]:
        item = response.item
        assert item is not None
        playback = response.playback
        effects: list[Effect] = []
        if playback is not None:
            if status == "completed":
                playback.committed_ms = playback.generated_ms
            else:  # history keeps what was heard; audio never sent is gone
                heard = playback.stop(now)
                self._truncate_item(item, heard)
                if response.is_audio:
                    effects.append(self._truncated(item.id, heard))
        item.status = "completed" if status == "completed" else "incomplete"
        refs = response.item_refs()
        text = item.text or ""
        if response.is_audio:
            effects.append(self._event("response.output_audio.done", **refs))
            effects.append(self._event("response.output_audio_transcript.done", transcript=text, **refs))
        else:
            effects.append(self._event("response.output_text.done", text=text, **refs))
        part = {
            "type": "audio" if response.is_audio else "text",
            "transcript" if response.is_audio else "text": text,
        }
        effects.append(self._event("response.content_part.done", part=part, **refs))
        index = response.output_index(item)
        effects.append(
            self._event(
                "response.output_item.done", response_id=response.id, output_index=index, item=item.to_wire()
            )
        )
        if response.conversation != "none":
            effects.append(self._event("conversation.item.done", item=item.to_wire(), previous_item_id=None))
        return effects

    # --- model outputs ---------------------------------------------------------------

    def on_output(self, output: VoiceOutput, now: float) -> list[Effect]:
        """Apply one model output; outputs of an older epoch are dropped (the fence)."""
        if self.is_closed:
            return []
        if output.epoch != self.epoch:
            self.num_stale_outputs += 1
            return []
        kind = output.kind
        if kind is OutputKind.SPEECH_STARTED:
            return self._speech_started(output.audio_ms, now) if self.model.has_vad else []
        if kind is OutputKind.SPEECH_STOPPED:
            return self._speech_stopped(output.audio_ms, now) if self.model.has_vad else []
        if kind in (OutputKind.TRANSCRIPT_DELTA, OutputKind.TRANSCRIPT_DONE):
            return self._on_transcript(output)
        if kind is OutputKind.ERROR and (
            output.response_id is None or self._live(output.response_id) is None
        ):
            return [
                self._event("error", error=MODEL_FAILED.event_body(detail=output.text or "the model failed"))
            ]
        response = self._live(output.response_id)
        if response is None:
            return []
        if kind is OutputKind.TEXT_DELTA:
            return self._on_text(response, output.text)
        if kind is OutputKind.AUDIO_DELTA:
            return self._on_audio(response, output.audio, now)
        if kind is OutputKind.FUNCTION_CALL:
            return self._on_call(response, output)
        if kind is OutputKind.LISTEN:
            effects = [
                self._event("response.listen", response_id=response.id, reason=output.text or "model_listens")
            ]
            return effects + self._end_response(now, "completed", None)
        if kind is OutputKind.ERROR:
            details = {"type": "failed", "error": MODEL_FAILED.body(detail=output.text or "the model failed")}
            return self._end_response(now, "failed", details)
        status = output.status if output.status in ("completed", "incomplete", "failed") else "completed"
        response.model_status = status
        response.model_reason = output.code
        if output.usage is not None:
            response.usage = usage.reported(output.usage)
        tail = response.encoder.flush()
        if tail and response.playback is not None:
            end = response.playback.generated_ms
            response.pending_audio.append(AudioChunk(end, end, base64.b64encode(tail).decode("ascii")))
        return self.tick(now)

    def _live(self, response_id: str | None) -> Response | None:
        response = self.response
        return response if response is not None and response_id in (None, response.id) else None

    def _on_transcript(self, output: VoiceOutput) -> list[Effect]:
        item_id = output.item_id
        if item_id is None and output.kind is OutputKind.TRANSCRIPT_DELTA:
            # A live caption of the turn being spoken: it belongs to the item that turn will become,
            # the id ``speech_started`` announced (none without server VAD: the caption is dropped).
            item_id = self._vad_item_id
            if item_id is None or not output.text:
                return []
        elif (
            item_id is None
            or item_id not in self.conversation
            or self.conversation.get(item_id).role != "user"
        ):
            return []  # an input transcription belongs to a user's turn, never to an answer
        if output.kind is OutputKind.TRANSCRIPT_DELTA:
            return [
                self._event(
                    "conversation.item.input_audio_transcription.delta",
                    item_id=item_id,
                    content_index=0,
                    delta=output.text,
                )
            ]
        self.conversation.get(item_id).text = output.text
        return [
            self._event(
                "conversation.item.input_audio_transcription.completed",
                item_id=output.item_id,
                content_index=0,
                transcript=output.text,
                usage={"type": "duration", "seconds": 0},
                **({} if output.logprobs is None else {"logprobs": list(output.logprobs)}),
            )
        ]

    def _ensure_item(self, response: Response) -> list[Effect]:
        if response.item is not None:
            return []
        content_type = "output_audio" if response.is_audio else "output_text"
        item = Item(
            id=self.ids("item"), role="assistant", content_type=content_type, text="", status="in_progress"
        )
        response.item = item
        response.outputs.append(item)
        previous = self.conversation.add(item) if response.conversation != "none" else None
        playback = Playback(response_id=response.id, item_id=item.id)
        response.playback = playback
        self.playbacks[item.id] = playback
        while len(self.playbacks) > MAX_PLAYBACKS:
            del self.playbacks[next(iter(self.playbacks))]
        part = {
            "type": "audio" if response.is_audio else "text",
            "transcript" if response.is_audio else "text": "",
        }
        effects: list[Effect] = [
            self._event(
                "response.output_item.added",
                response_id=response.id,
                output_index=response.output_index(item),
                item=item.to_wire(),
            )
        ]
        if response.conversation != "none":
            effects.append(
                self._event("conversation.item.added", item=item.to_wire(), previous_item_id=previous)
            )
        effects.append(self._event("response.content_part.added", part=part, **response.item_refs()))
        return effects

    def _on_call(self, response: Response, output: VoiceOutput) -> list[Effect]:
        """One whole function call: its item, its arguments (one delta, then done), pending its output."""
        call_id = output.call_id
        if not call_id or call_id in self.calls:  # the model gave none, or reused one: ours is unique
            call_id = self.ids("call")
        item = Item(
            id=self.ids("item"),
            role="assistant",
            content_type="",
            text="",
            status="in_progress",
            type="function_call",
            call_id=call_id,
            name=output.name or "unnamed",
        )
        response.outputs.append(item)
        index = response.output_index(item)
        is_kept = response.conversation != "none"
        previous = self.conversation.add(item) if is_kept else None
        refs = {"response_id": response.id, "item_id": item.id, "output_index": index, "call_id": call_id}
        effects: list[Effect] = [
            self._event(
                "response.output_item.added", response_id=response.id, output_index=index, item=item.to_wire()
            )
        ]
        if is_kept:
            effects.append(
                self._event("conversation.item.added", item=item.to_wire(), previous_item_id=previous)
            )
        item.text = output.text
        effects.append(self._event("response.function_call_arguments.delta", delta=output.text, **refs))
        effects.append(
            self._event("response.function_call_arguments.done", name=item.name, arguments=item.text, **refs)
        )
        item.status = "completed"
        self.calls.open(call_id, response.id)
        effects.append(
            self._event(
                "response.output_item.done", response_id=response.id, output_index=index, item=item.to_wire()
            )
        )
        if is_kept:
            effects.append(
                self._event("conversation.item.done", item=item.to_wire(), previous_item_id=previous)
            )
        return effects

    def _on_text(self, response: Response, text: str) -> list[Effect]:
        effects = self._ensure_item(response)
        item, playback = response.item, response.playback
        assert item is not None and playback is not None
        item.text = (item.text or "") + text
        playback.marks.append((playback.generated_ms, len(item.text)))
        kind = "response.output_audio_transcript.delta" if response.is_audio else "response.output_text.delta"
        effects.append(self._event(kind, delta=text, **response.item_refs()))
        return effects

    def _on_audio(self, response: Response, pcm: bytes, now: float) -> list[Effect]:
        if not response.is_audio or not pcm:
            return []
        effects = self._ensure_item(response)
        item, playback = response.item, response.playback
        assert item is not None and playback is not None
        duration = pcm_ms(len(pcm), self.model.output_rate)
        if response.num_pending_ms + duration > self.limits.max_buffered_output_ms:
            details = {"type": "failed", "error": OUTPUT_OVERFLOW.body()}
            return effects + self._end_response(now, "failed", details)
        encoded = base64.b64encode(response.encoder.encode(pcm)).decode("ascii")
        start = playback.generated_ms
        playback.generated_ms += duration
        item.audio_ms = item.generated_audio_ms = playback.generated_ms
        response.pending_audio.append(AudioChunk(start, playback.generated_ms, encoded))
        return effects + self.tick(now)

    # --- the clock -------------------------------------------------------------------

    def tick(self, now: float) -> list[Effect]:
        """Release audio that is due (real time plus the lead); finish a response whose audio is out."""
        response = self.response
        if response is None or self.is_closed:
            return []
        effects: list[Effect] = []
        playback = response.playback
        while response.pending_audio and playback is not None:
            chunk = response.pending_audio[0]
            if playback.started_at is not None and now < self._due(playback.started_at, chunk):
                break
            if playback.started_at is None:
                playback.started_at = now
            response.pending_audio.popleft()
            playback.sent_ms = chunk.end_ms
            effects.append(
                self._event("response.output_audio.delta", delta=chunk.audio, **response.item_refs())
            )
        if response.model_status is not None and not response.pending_audio:
            details: dict[str, Any] | None = None
            if response.model_status != "completed":
                details = {"type": response.model_status}
                if response.model_reason:
                    details["reason"] = response.model_reason
            effects += self._end_response(now, response.model_status, details)
        return effects

    def _due(self, started_at: float, chunk: AudioChunk) -> float:
        return started_at + (chunk.end_ms - self.limits.lead_ms) / 1000.0

    def next_deadline(self) -> float | None:
        """When ``tick`` next has audio to release, if any is held back."""
        response = self.response
        if response is None or not response.pending_audio or response.playback is None:
            return None
        if response.playback.started_at is None:
            return 0.0
        return self._due(response.playback.started_at, response.pending_audio[0])

    def on_outbox_overflow(self, now: float) -> list[Effect]:
        """The client reads too slowly: fail the live response, with a clear error."""
        details = {"type": "failed", "error": OUTBOX_OVERFLOW.body()}
        return self._end_response(now, "failed", details)
