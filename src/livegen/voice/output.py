"""What a voice session says: model outputs become wire events, paced audio, one terminal each.

The ``Speaker`` is the session's output half, beside the ``Listener``
(``listener.py``), its input half; the session (``voice/session.py``) owns
both. The speaker holds the live response, takes the client's requests about
it (create, cancel, clear the output, acks), turns the model's outputs into
OpenAI's response events, holds audio back to real time plus a lead
(``tick``), and ends each response exactly once (``end``), cutting its item to
what the listener heard (``heard.py`` keeps the playback ledgers). The fence
(which outputs are current) is the session's: the speaker is only given
outputs that passed it, and asks its owner (``Owner``, the narrow interface it
declares) to advance it. When a response ends the speaker settles the attempts
bound to it and tells its owner through ``on_finished`` (the listener starts the
idle clock), so every way a response ends settles the same state.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any, Protocol

from msgspec import UNSET

from livegen.models.voice import OutputKind, VoiceOutput
from livegen.protocol import realtime as wire
from livegen.protocol.audio import pcm_ms
from livegen.protocol.errors import (
    CONVERSATION_ALREADY_HAS_ACTIVE_RESPONSE,
    MODEL_FAILED,
    MODEL_FAILURES,
    NO_RESPONSES_IN_TRANSCRIPTION,
    OUTPUT_OVERFLOW,
    RESPONSE_CANCEL_NOT_ACTIVE,
    STAGE_FAILURES,
)
from livegen.protocol.realtime import server as ev
from livegen.protocol.realtime.items import content_part
from livegen.voice import duplex, mcp, usage
from livegen.voice.attempts import Attempts
from livegen.voice.calls import CallLedger
from livegen.voice.chain import AttemptKind, DropOutput, Effect, Run, Send, stamped
from livegen.voice.config import Config
from livegen.voice.conversation import Conversation, Item
from livegen.voice.heard import Heard
from livegen.voice.ledger import Playback
from livegen.voice.options import ResponseOptions, plan_response, response_options, session_options
from livegen.voice.response import AudioChunk, Response
from livegen.voice.settings import IdFactory, Limits, ModelFacts

#: The outputs of a response's MCP calls (``voice/mcp.py``).
MCP_KINDS = frozenset({OutputKind.MCP_CALL, OutputKind.MCP_CALL_DONE, OutputKind.MCP_APPROVAL_REQUEST})
#: The phases of an answer's message items (OpenAI's): a spoken preamble, then the answer.
PHASES = ("commentary", "final_answer")

#: Called once when a response ends, with the response and ``now``.
Finished = Callable[[Response, float], None]


def _no_hook(response: Response, now: float) -> None:
    return None


class Owner(Protocol):
    """What the speaker reads of its session to plan an answer, and the fence it asks to advance."""

    @property
    def config(self) -> Config: ...

    @property
    def model(self) -> ModelFacts: ...

    @property
    def epoch(self) -> int: ...

    def interrupt(self, now: float, reason: str) -> list[Effect]: ...


class Speaker:
    """The live response, the client's requests about it, and every event of its lifecycle."""

    def __init__(
        self,
        owner: Owner,
        chain: Attempts,
        ids: IdFactory,
        limits: Limits,
        conversation: Conversation,
        calls: CallLedger,
        on_finished: Finished = _no_hook,
    ) -> None:
        self.owner = owner
        self.chain = chain
        self.ids = ids
        self.limits = limits
        self.conversation = conversation
        self.calls = calls
        self.on_finished = on_finished
        self.response: Response | None = None
        self.heard = Heard(ids, conversation, calls)
        #: Playback ledgers of recent answers, by item id (``heard``'s).
        self.playbacks: dict[str, Playback] = self.heard.playbacks

    def _send(self, event: ev.ServerEvent) -> Send:
        return stamped(event, self.ids)

    # --- the client's requests -------------------------------------------------------

    def on_response_create(self, event: wire.ResponseCreate, now: float) -> list[Effect]:
        config = self.owner.config
        if config.is_transcription:
            raise NO_RESPONSES_IN_TRANSCRIPTION.error()
        if self.owner.model.is_duplex:
            raise duplex.refused_event(event.TYPE)
        if self.response is not None:
            raise CONVERSATION_ALREADY_HAS_ACTIVE_RESPONSE.error(response_id=self.response.id)
        options = response_options(event.response or {}, config, self.conversation, self.ids)
        return self.respond(now, options)

    def respond(self, now: float, options: ResponseOptions | None = None) -> list[Effect]:
        """Pre-create a response (``response.created``) and put its request on the chain."""
        config, epoch = self.owner.config, self.owner.epoch
        plan = options or session_options(config)
        response, request = plan_response(
            plan, config, self.conversation, self.ids("resp"), epoch, self.owner.model.output_rate
        )
        respond = self.chain.add(AttemptKind.RESPOND, epoch, now, request=request, response_id=response.id)
        return [self.begin(response), Run(respond)]

    def on_response_cancel(self, event: wire.ResponseCancel, now: float) -> list[Effect]:
        if self.response is None or event.response_id not in (None, self.response.id):
            raise RESPONSE_CANCEL_NOT_ACTIVE.error()
        return self.owner.interrupt(now, "client_cancelled")

    def on_output_clear(self, event: wire.OutputAudioClear, now: float) -> list[Effect]:
        effects = self.owner.interrupt(now, "client_cancelled")
        effects.append(self._send(ev.OutputAudioBufferCleared(response_id=None)))
        return effects

    def on_playback_ack(self, event: wire.PlaybackAck, now: float) -> list[Effect]:
        self.heard.ack(event.response_id, event.item_id, event.played_ms)
        return []

    # --- the response lifecycle ------------------------------------------------------

    def begin(self, response: Response) -> Send:
        """``response`` is now the live one: its ``response.created``."""
        self.response = response
        return self._send(ev.ResponseCreated(response=response.to_object("in_progress")))

    def live(self, response_id: str | None) -> Response | None:
        """The live response, if ``response_id`` names it (``None`` names any)."""
        response = self.response
        return response if response is not None and response_id in (None, response.id) else None

    def end(self, now: float, status: str, details: dict[str, Any] | None) -> list[Effect]:
        """The one ``response.done`` of the live response (nothing when none is live)."""
        response = self.response
        if response is None:
            return []
        self.response = None
        response.is_finished = True
        effects: list[Effect] = []
        if status != "completed":
            effects.append(DropOutput(response.id))
        for chunk in [c for c in response.pending_audio if c.closes]:  # a preamble not yet out
            assert chunk.item is not None
            effects += self._close_message(response, chunk.item, chunk.playback, status, now)
        response.pending_audio.clear()
        if response.item is not None:
            effects += self._close_message(response, response.item, response.playback, status, now)
        if status != "completed":
            self.heard.abandon_calls(response.id)
        mcp.abandon(response)
        if response.usage is None:
            response.usage = usage.counted(response.request_words, response.outputs)
        effects.append(self._send(ev.ResponseDone(response=response.to_object(status, details))))
        self.chain.cancel_bound(response.id)  # the terminal is sent: what is bound to it is owed nothing
        self.on_finished(response, now)
        return effects

    def is_speaking(self, now: float) -> bool:
        """A response is running, or audio already sent is still playing at the client."""
        return self.response is not None or self.heard.is_playing(now)

    def _close_message(
        self, response: Response, item: Item, playback: Playback | None, status: str, now: float
    ) -> list[Effect]:
        effects: list[Effect] = []
        if playback is not None:
            if status == "completed":
                playback.committed_ms = playback.generated_ms
            else:  # history keeps what was heard; audio never sent is gone
                heard = playback.stop(now)
                self.heard.truncate_item(item, heard)
                if response.is_audio:
                    effects.append(self.heard.truncated(item.id, heard))
        item.status = "completed" if status == "completed" else "incomplete"
        refs = response.item_refs(item)
        text = item.text or ""
        if response.is_audio:
            effects.append(self._send(ev.OutputAudioDone(**refs)))
            effects.append(self._send(ev.OutputAudioTranscriptDone(transcript=text, **refs)))
        else:
            effects.append(self._send(ev.OutputTextDone(text=text, **refs)))
        part = content_part("audio" if response.is_audio else "text", text)
        effects.append(self._send(ev.ContentPartDone(part=part, **refs)))
        index = response.output_index(item)
        effects.append(
            self._send(ev.OutputItemDone(response_id=response.id, output_index=index, item=item.to_object()))
        )
        if response.conversation != "none":
            effects.append(self._send(ev.ItemDone(item=item.to_object(), previous_item_id=None)))
        return effects

    # --- model outputs ---------------------------------------------------------------

    def model_failed(self, text: str, code: str = "") -> list[Effect]:
        """A model error bound to no live response: an ``error`` event (a failed stage's code where
        the table names it), and the session goes on."""
        row = STAGE_FAILURES.get(code, MODEL_FAILED)
        return [self._send(ev.Error(error=row.event_body(detail=text or "the model failed")))]

    def on_output(self, response: Response, output: VoiceOutput, now: float) -> list[Effect]:
        """One output of the live ``response`` (text, audio, a call, a listen, an error, its end)."""
        kind = output.kind
        if kind is OutputKind.TEXT_DELTA:
            return self._on_text(response, output.text)
        if kind is OutputKind.AUDIO_DELTA:
            return self._on_audio(response, output.audio, now)
        if kind is OutputKind.FUNCTION_CALL:
            return self._on_call(response, output)
        if kind in MCP_KINDS:
            return mcp.on_output(response, output, self.conversation, self.ids, self._send)
        if kind is OutputKind.PHASE:
            return self._on_phase(response, output.text, now)
        if kind is OutputKind.LISTEN:
            effects = [
                self._send(ev.ResponseListen(response_id=response.id, reason=output.text or "model_listens"))
            ]
            return effects + self.end(now, "completed", None)
        if kind is OutputKind.ERROR:  # a failure the table names keeps its code (``llm_timeout``,
            # ``tts_unavailable``: a remote stage's failure says which)
            row = MODEL_FAILURES.get(output.code) or STAGE_FAILURES.get(output.code, MODEL_FAILED)
            details = {"type": "failed", "error": row.body(detail=output.text or "the model failed")}
            return self.end(now, "failed", details)
        return self._on_done(response, output, now)

    def _on_done(self, response: Response, output: VoiceOutput, now: float) -> list[Effect]:
        """The model finished: the response ends once its held audio is out (``tick``)."""
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

    def on_transcript(self, output: VoiceOutput, turn_item_id: str | None) -> list[Effect]:
        """An input transcription; a live caption without an item belongs to ``turn_item_id``."""
        item_id = output.item_id
        if item_id is None and output.kind is OutputKind.TRANSCRIPT_DELTA:
            # A live caption of the turn being spoken: it belongs to the item that turn will become,
            # the id ``speech_started`` announced (none without server VAD: the caption is dropped).
            item_id = turn_item_id
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
                self._send(
                    ev.InputTranscriptionDelta(
                        item_id=item_id,
                        content_index=0,
                        delta=output.text,
                    )
                )
            ]
        self.conversation.get(item_id).text = output.text
        return [
            self._send(
                ev.InputTranscriptionCompleted(
                    item_id=output.item_id,
                    content_index=0,
                    transcript=output.text,
                    usage={"type": "duration", "seconds": 0},
                    logprobs=UNSET if output.logprobs is None else [dict(e) for e in output.logprobs],
                )
            )
        ]

    def _ensure_item(self, response: Response) -> list[Effect]:
        if response.item is not None:
            return []
        content_type = "output_audio" if response.is_audio else "output_text"
        item = Item(
            id=self.ids("item"),
            role="assistant",
            content_type=content_type,
            text="",
            status="in_progress",
            phase=response.phase,
        )
        response.item = item
        response.outputs.append(item)
        previous = self.conversation.add(item) if response.conversation != "none" else None
        playback = Playback(response_id=response.id, item_id=item.id)
        response.playback = playback
        self.heard.add(playback)
        part = content_part("audio" if response.is_audio else "text", "")
        effects: list[Effect] = [
            self._send(
                ev.OutputItemAdded(
                    response_id=response.id,
                    output_index=response.output_index(item),
                    item=item.to_object(),
                )
            )
        ]
        if response.conversation != "none":
            effects.append(self._send(ev.ItemAdded(item=item.to_object(), previous_item_id=previous)))
        effects.append(self._send(ev.ContentPartAdded(part=part, **response.item_refs())))
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
        refs: dict[str, Any] = {
            "response_id": response.id,
            "item_id": item.id,
            "output_index": index,
            "call_id": call_id,
        }
        effects: list[Effect] = [
            self._send(ev.OutputItemAdded(response_id=response.id, output_index=index, item=item.to_object()))
        ]
        if is_kept:
            effects.append(self._send(ev.ItemAdded(item=item.to_object(), previous_item_id=previous)))
        item.text = output.text
        effects.append(self._send(ev.FunctionCallArgumentsDelta(delta=output.text, **refs)))
        effects.append(self._send(ev.FunctionCallArgumentsDone(name=item.name, arguments=item.text, **refs)))
        item.status = "completed"
        self.calls.open(call_id, response.id)
        effects.append(
            self._send(ev.OutputItemDone(response_id=response.id, output_index=index, item=item.to_object()))
        )
        if is_kept:
            effects.append(self._send(ev.ItemDone(item=item.to_object(), previous_item_id=previous)))
        return effects

    def _on_phase(self, response: Response, phase: str, now: float) -> list[Effect]:
        """What follows is a new message item in ``phase``: the item being spoken ends once its
        audio is out (a marker in the pending audio), so each item's audio stays whole and paced."""
        if phase not in PHASES or (response.item is not None and response.item.phase == phase):
            return []
        response.phase = phase
        item, playback = response.item, response.playback
        if item is None:
            return []
        end = playback.generated_ms if playback is not None else 0.0
        response.pending_audio.append(AudioChunk(end, end, "", item=item, playback=playback, closes=True))
        response.item = response.playback = None
        return self.tick(now)

    def _on_text(self, response: Response, text: str) -> list[Effect]:
        effects = self._ensure_item(response)
        item, playback = response.item, response.playback
        assert item is not None and playback is not None
        item.text = (item.text or "") + text
        playback.marks.append((playback.generated_ms, len(item.text)))
        kind = ev.OutputAudioTranscriptDelta if response.is_audio else ev.OutputTextDelta
        effects.append(self._send(kind(delta=text, **response.item_refs())))
        return effects

    def _on_audio(self, response: Response, pcm: bytes, now: float) -> list[Effect]:
        if not response.is_audio or not pcm:
            return []
        effects = self._ensure_item(response)
        item, playback = response.item, response.playback
        assert item is not None and playback is not None
        duration = pcm_ms(len(pcm), self.owner.model.output_rate)
        if response.num_pending_ms + duration > self.limits.max_buffered_output_ms:
            details = {"type": "failed", "error": OUTPUT_OVERFLOW.body()}
            return effects + self.end(now, "failed", details)
        encoded = base64.b64encode(response.encoder.encode(pcm)).decode("ascii")
        start = playback.generated_ms
        playback.generated_ms += duration
        item.audio_ms = item.generated_audio_ms = playback.generated_ms
        response.pending_audio.append(AudioChunk(start, playback.generated_ms, encoded, item, playback))
        return effects + self.tick(now)

    # --- the clock -------------------------------------------------------------------

    def tick(self, now: float) -> list[Effect]:
        """Release audio that is due (real time plus the lead); finish a response whose audio is out."""
        response = self.response
        if response is None:
            return []
        effects: list[Effect] = []
        while response.pending_audio:
            chunk = response.pending_audio[0]
            playback = chunk.playback or response.playback
            if playback is None:
                break
            if chunk.closes:  # an item's audio is all out: it ends; the next plays after it
                response.pending_audio.popleft()
                response.next_start = (playback.started_at or now) + playback.generated_ms / 1000.0
                assert chunk.item is not None
                effects += self._close_message(response, chunk.item, playback, "completed", now)
                continue
            if playback.started_at is not None and now < self._due(playback.started_at, chunk):
                break
            if playback.started_at is None:
                playback.started_at = max(now, response.next_start or now)
            response.pending_audio.popleft()
            playback.sent_ms = chunk.end_ms
            refs = response.item_refs(chunk.item)
            effects.append(self._send(ev.OutputAudioDelta(delta=chunk.audio, **refs)))
        if response.model_status is not None and not response.pending_audio:
            details: dict[str, Any] | None = None
            if response.model_status != "completed":
                details = {"type": response.model_status}
                if response.model_reason:
                    details["reason"] = response.model_reason
            effects += self.end(now, response.model_status, details)
        return effects

    def finish_now(self, now: float) -> list[Effect]:
        """End the live response now, as the model ended it, with every chunk it holds sent first."""
        response = self.response
        if response is None:
            return []
        effects: list[Effect] = []
        playback = response.playback
        while response.pending_audio and playback is not None:
            chunk = response.pending_audio.popleft()
            if playback.started_at is None:
                playback.started_at = now
            playback.sent_ms = chunk.end_ms
            effects.append(self._send(ev.OutputAudioDelta(delta=chunk.audio, **response.item_refs())))
        return effects + self.end(now, response.model_status or "completed", None)

    def _due(self, started_at: float, chunk: AudioChunk) -> float:
        return started_at + (chunk.end_ms - self.limits.lead_ms) / 1000.0

    def next_deadline(self) -> float | None:
        """When ``tick`` next has audio to release, if any is held back."""
        response = self.response
        if response is None or not response.pending_audio:
            return None
        chunk = response.pending_audio[0]
        playback = chunk.playback or response.playback
        if playback is None:
            return None
        if playback.started_at is None or chunk.closes:
            return 0.0
        return self._due(playback.started_at, chunk)
