"""Turn policy of a voice session: speech edges commit turns and barge in; the idle timeout.

A plain object that the session's listener (``voice/listener.py``) owns and asks. Server
VAD (the model's own detector, or ``vad.py``'s, which the policy keeps) reports
speech edges: speech starting interrupts a response that is still speaking
(barge-in, through the session's fence); speech stopping commits the turn and,
with ``create_response``, asks for an answer. ``idle_timeout_ms`` answers a
silent user: it is timed from when the last answer finished playing, and fires
once per answer. The policy decides and the listener acts: each edge returns a
``TurnStep`` (the event, then whether to barge in, commit, respond), so the
policy never reaches into the chain, the conversation or the speaker.
"""

from __future__ import annotations

from dataclasses import dataclass

from livegen.protocol.realtime import server as ev
from livegen.voice.chain import Send, stamped
from livegen.voice.settings import IdFactory
from livegen.voice.turn_detection import ServerVad
from livegen.voice.vad import EnergyVad, Transition


@dataclass(frozen=True)
class TurnStep:
    """What a turn edge asks of the session, in this order: send, barge in, commit, respond."""

    event: Send
    barge_in: bool = False
    #: The item id to commit the buffered input as; ``None``: nothing to commit.
    commit: str | None = None
    respond: bool = False


class TurnPolicy:
    """The turn being spoken, the fallback detector, and the idle clock."""

    def __init__(self, ids: IdFactory) -> None:
        self.ids = ids
        #: The item the turn being spoken will become, announced by ``speech_started``.
        self.item_id: str | None = None
        #: The user is mid-speech, and since when (and from which input ms) nobody has spoken
        #: since the last response finished playing.
        self.in_speech = False
        self.idle_from: float | None = None
        self.idle_input_ms = 0.0
        self._vad: EnergyVad | None = None

    def _send(self, event: ev.ServerEvent) -> Send:
        return stamped(event, self.ids)

    # --- the detector ----------------------------------------------------------------

    def configure(self, vad: ServerVad | None, model_has_vad: bool, input_rate: int) -> None:
        """A new turn detection (or model): the fallback detector runs when the model has none."""
        self.in_speech = False
        if vad is None or model_has_vad:
            self._vad = None
        else:
            self._vad = EnergyVad(input_rate, vad.threshold, vad.silence_duration_ms)

    def feed(self, pcm: bytes) -> list[Transition]:
        """Input audio through the fallback detector: its speech edges (none without one)."""
        return [] if self._vad is None else self._vad.feed(pcm)

    def committed(self) -> None:
        """The buffered turn became an item: the next one gets a new id."""
        self.item_id = None

    def dropped(self) -> None:
        """The buffered turn was thrown away: so is what the detector heard of it."""
        self.item_id = None
        if self._vad is not None:
            self._vad.reset()

    # --- speech edges ----------------------------------------------------------------

    def started(self, vad: ServerVad, audio_ms: float, is_speaking: bool) -> TurnStep:
        """The user began speaking; ``is_speaking``: an answer is still running or playing."""
        self.in_speech = True
        self.idle_from = None
        self.item_id = self.item_id or self.ids("item")
        start = max(0, round(audio_ms) - vad.prefix_padding_ms)
        event = self._send(ev.SpeechStarted(audio_start_ms=start, item_id=self.item_id))
        return TurnStep(event, barge_in=vad.interrupt_response and is_speaking)

    def stopped(self, vad: ServerVad, audio_ms: float, is_buffered: bool, can_respond: bool) -> TurnStep:
        """The user stopped: commit what is buffered, and answer if asked to and able."""
        self.in_speech = False
        item_id = self.item_id or self.ids("item")
        end = round(audio_ms)
        event = self._send(ev.SpeechStopped(audio_end_ms=end, item_id=item_id))
        if not is_buffered:
            return TurnStep(event)
        return TurnStep(event, commit=item_id, respond=vad.create_response and can_respond)

    # --- the idle timeout ------------------------------------------------------------

    def answered(self, played_until: float, input_ms: float) -> None:
        """An answer ended, heard in full at ``played_until``: the idle clock starts there."""
        self.idle_from, self.idle_input_ms = played_until, input_ms

    def deadline(self, vad: ServerVad | None, can_idle: bool) -> float | None:
        """When the idle timeout fires; ``can_idle``: no response is live and one may be made."""
        if vad is None or vad.idle_timeout_ms is None or self.idle_from is None:
            return None
        if not can_idle or self.in_speech:
            return None
        return self.idle_from + vad.idle_timeout_ms / 1000.0

    def timed_out(self, input_ms: float, is_buffered: bool) -> TurnStep:
        """Nobody spoke for ``idle_timeout_ms`` after the answer: commit what came in, and answer."""
        self.idle_from = None
        item_id = self.item_id or self.ids("item")
        event = self._send(
            ev.TimeoutTriggered(
                audio_start_ms=round(self.idle_input_ms),
                audio_end_ms=round(input_ms),
                item_id=item_id,
            )
        )
        return TurnStep(event, commit=item_id if is_buffered else None, respond=True)
