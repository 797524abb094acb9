"""What a voice session hears: input audio from append to commit, and the turns spoken into it.

The ``Listener`` is the session's input half, beside the ``Speaker``
(``output.py``), its output half; the session (``session.py``) owns both and
keeps the fence. The listener owns the input buffer: the decoder (the client's
format to the model's rate), the input rate bound, the reservations against the
input budget (``ledger.py``), and what is buffered since the last commit. It
owns the turn policy too (``turns.py``): speech edges and the idle timeout
become ``TurnStep`` decisions, which the listener carries out (commit the turn,
ask the speaker for an answer) and for which it asks its owner to barge in.
It declares what it needs of that owner as ``Owner``, so it never imports the
session.
"""

from __future__ import annotations

from typing import Protocol

from livegen.errors import CapacityExceeded
from livegen.protocol import realtime as wire
from livegen.protocol.audio import AudioFormat, InputDecoder, pcm_ms
from livegen.protocol.errors import INPUT_AUDIO_BUFFER_COMMIT_EMPTY, TOO_MANY_PENDING_COMMITS
from livegen.protocol.realtime import server as ev
from livegen.voice.attempts import Attempts
from livegen.voice.chain import INPUT_KINDS, Attempt, AttemptKind, Effect, Run, Send, stamped
from livegen.voice.conversation import Conversation, Item
from livegen.voice.input_rate import InputRate
from livegen.voice.ledger import InputLedger
from livegen.voice.output import Owner as SpeakerOwner
from livegen.voice.output import Speaker
from livegen.voice.response import Response
from livegen.voice.settings import IdFactory, Limits
from livegen.voice.turns import TurnPolicy, TurnStep
from livegen.voice.vad import Edge


class Owner(SpeakerOwner, Protocol):
    """What the listener reads of its session and the fence it asks to advance (as the speaker
    does), and the barge-in it asks for."""

    def barge_in(self, now: float) -> list[Effect]: ...


class Listener:
    """The input buffer of one session, its bounds and reservations, and the turn policy."""

    def __init__(
        self,
        owner: Owner,
        ids: IdFactory,
        limits: Limits,
        chain: Attempts,
        conversation: Conversation,
        speaker: Speaker,
    ) -> None:
        self.owner = owner
        self.ids = ids
        self.limits = limits
        self.chain = chain
        self.conversation = conversation
        self.speaker = speaker
        self.ledger = InputLedger(limits.max_input_bytes)
        self._input_rate = InputRate(limits.input_rate_factor, limits.input_burst_ms)
        self.decoder = InputDecoder(owner.config.input_format, owner.model.input_rate)
        self.turns = TurnPolicy(ids)
        #: Input ms accepted since the session began (the VAD clock); bytes since the last commit.
        self.input_ms = 0.0
        self.buffer_bytes = 0

    def _send(self, event: ev.ServerEvent) -> Send:
        return stamped(event, self.ids)

    def set_format(self, input_format: AudioFormat, input_rate: int) -> None:
        """A new input format or model: a decoder for it (what the old one held is gone)."""
        self.decoder = InputDecoder(input_format, input_rate)

    def reset_turns(self) -> None:
        """A new turn detection or model: the detector starts afresh."""
        config, model = self.owner.config, self.owner.model
        self.turns.configure(config.turn_detection, model.has_vad, model.input_rate)

    def close(self) -> None:
        """The session closed: every reservation is given back, nothing is buffered."""
        self.ledger.clear()
        self.buffer_bytes = 0

    # --- the client's input events ---------------------------------------------------

    def on_append(self, event: wire.AudioAppend, now: float) -> list[Effect]:
        decoder = self.decoder
        # Bounded before decoding, from the base64 length, so a refused flood costs nothing.
        audio_ms = len(event.audio) * 3 // 4 * 1000 / (decoder.wire.rate * decoder.wire.bytes_per_sample)
        self._input_rate.check(audio_ms, now)
        data = event.audio_bytes()
        decoder.check(data)
        if not data:
            return []
        # Reserve before decoding so a refused append leaves the resampler untouched.
        reservation = self.ledger.reserve(decoder.estimate(len(data)))
        pcm = decoder.decode(data)
        self.ledger.resize(reservation, len(pcm))
        self._input_rate.spend(audio_ms)
        self.buffer_bytes += len(pcm)
        self.input_ms += pcm_ms(len(pcm), self.owner.model.input_rate)
        append = self.chain.add(AttemptKind.APPEND, self.owner.epoch, now, pcm=pcm, reservation=reservation)
        effects: list[Effect] = [Run(append)]
        for transition in self.turns.feed(pcm):
            if transition.edge is Edge.STARTED:
                effects += self.speech_started(transition.audio_ms, now)
            else:
                effects += self.speech_stopped(transition.audio_ms, now)
        return effects

    def on_commit(self, event: wire.AudioCommit, now: float) -> list[Effect]:
        if self.buffer_bytes == 0:
            raise INPUT_AUDIO_BUFFER_COMMIT_EMPTY.error(min_ms=1, buffered_ms=0.0)
        return self.commit(self.ids("item"), now)

    def commit(self, item_id: str, now: float) -> list[Effect]:
        """What is buffered becomes the user's item ``item_id``, and the model is asked to commit it."""
        chain, epoch = self.chain, self.owner.epoch
        if chain.num_pending_commits >= self.limits.max_pending_commits:
            raise TOO_MANY_PENDING_COMMITS.error(pending=chain.num_pending_commits)
        effects: list[Effect] = []
        tail = self.decoder.flush()  # the turn's last ms, held in the resampler
        if tail:
            reservation = self.ledger.reserve(len(tail), is_forced=True)
            effects.append(Run(chain.add(AttemptKind.APPEND, epoch, now, pcm=tail, reservation=reservation)))
        self.buffer_bytes = 0
        self.turns.committed()
        item = Item(id=item_id, role="user", content_type="input_audio")
        previous = self.conversation.add(item)
        commit = chain.add(AttemptKind.COMMIT, epoch, now, item_id=item_id)
        return [
            *effects,
            Run(commit),
            self._send(ev.InputAudioBufferCommitted(item_id=item_id, previous_item_id=previous)),
            self._send(ev.ItemAdded(item=item.to_object(), previous_item_id=previous)),
            self._send(ev.ItemDone(item=item.to_object(), previous_item_id=previous)),
        ]

    def on_clear(self, event: wire.AudioClear, now: float) -> list[Effect]:
        effects = self.owner.interrupt(now, "client_cancelled")
        # Only audio after the last commit is dropped: committed turns still reach the model.
        dropped = self.chain.cancel_uncommitted()
        if dropped and dropped[0].reservation is not None:
            self.ledger.rollback(dropped[0].reservation)
        self.decoder.flush()  # what the resampler held is uncommitted audio too: dropped
        self.buffer_bytes = 0
        self.turns.dropped()
        effects += self.chain.control(AttemptKind.CLEAR, self.owner.epoch, now)
        effects.append(self._send(ev.InputAudioBufferCleared()))
        return effects

    # --- the chain's failures --------------------------------------------------------

    def broken(self, failed: Attempt, later: list[Attempt], now: float) -> list[Effect]:
        """``failed`` broke the chain: give back what it and the ``later`` inputs reserved. The
        turn in progress is rolled back too: the model, the resampler and the detector drop what
        they hold of it, so the next append starts afresh (a model that refused input for being
        full would otherwise refuse every append after)."""
        if failed.reservation is not None:
            self.ledger.rollback(failed.reservation)
        if failed.kind not in INPUT_KINDS:
            return []
        for attempt in later:
            if attempt.reservation is not None:
                self.ledger.rollback(attempt.reservation)
        self.buffer_bytes = 0
        self.turns.dropped()
        self.decoder.flush()
        return self.chain.control(AttemptKind.CLEAR, self.owner.epoch, now)

    # --- turns -------------------------------------------------------------------------

    def speech_started(self, audio_ms: float, now: float) -> list[Effect]:
        vad = self.owner.config.turn_detection
        if vad is None:
            return []
        return self._take_turn(self.turns.started(vad, audio_ms, self.speaker.is_speaking(now)), now)

    def speech_stopped(self, audio_ms: float, now: float) -> list[Effect]:
        config, model = self.owner.config, self.owner.model
        vad = config.turn_detection
        if vad is None:
            return []
        can_respond = self.speaker.response is None and not config.is_transcription and not model.is_duplex
        return self._take_turn(self.turns.stopped(vad, audio_ms, self.buffer_bytes > 0, can_respond), now)

    def _take_turn(self, step: TurnStep, now: float) -> list[Effect]:
        """Carry out the turn policy's decision: its event, then barge in, commit, respond."""
        effects: list[Effect] = [step.event]
        if step.barge_in:
            effects += self.owner.barge_in(now)
        if step.commit is not None:
            try:
                effects += self.commit(step.commit, now)
            except CapacityExceeded as error:
                return [*effects, self._send(ev.Error(error=error.to_error_body()))]
        if step.respond:
            effects += self.speaker.respond(now)
        return effects

    # --- the idle timeout --------------------------------------------------------------

    def answered(self, response: Response, now: float) -> None:
        """The speaker ended ``response``: the idle clock starts when the user has heard it all."""
        playback = response.playback
        self.turns.answered(now if playback is None else playback.played_until(now), self.input_ms)

    def idle_deadline(self) -> float | None:
        config = self.owner.config
        vad = config.turn_detection
        if vad is None or vad.idle_timeout_ms is None:
            return None  # no idle timeout (the common case), asked before every event: decided first
        # The idle timeout answers, and a transcription session never does.
        return self.turns.deadline(vad, self.speaker.response is None and not config.is_transcription)

    def tick(self, now: float) -> list[Effect]:
        """Fire the idle timeout when it is due."""
        deadline = self.idle_deadline()
        if deadline is None or now < deadline:
            return []
        return self._take_turn(self.turns.timed_out(self.input_ms, self.buffer_bytes > 0), now)
