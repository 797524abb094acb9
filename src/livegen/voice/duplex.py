"""Native full-duplex (lockstep) models in the voice core: the model's own turns, and what it cannot do.

A cascade answers when asked (``response.create``, or a turn that server VAD
committed). A native duplex model (``models/lockstep.py``, served by
``runtime/voice/lockstep_voice.py``) hears all the time and speaks when it
chooses, so its responses begin on its side: its outputs come untagged by
response, and these rules, applied by the session (``voice/session.py``),
make them the Realtime API's responses:

- its first audio or text while no response is live begins one
  (``response.created``; the speaker then adds the item and the deltas);
- its turn's end (``RESPONSE_DONE``) ends it ``completed`` once its audio is
  out, unless the user is speaking at that moment: then the model stopped for
  the user, a barge-in, and the response ends ``cancelled`` with history cut
  to what was heard, through the epoch fence (V2, V6);
- speech the session detects on the input while the model speaks is the
  usual barge-in (``turns.py``); a speech stop commits the user's turn but
  never asks for an answer;
- a new turn while the last one's audio is still held back ends the last one
  first (its audio sent whole), so each turn is one response with exactly one
  terminal (V4).

What such a model cannot honour is refused by name (V12), never ignored: a
client's ``response.create`` and ``conversation.item.create`` (it takes no
requests and no text), and every ``session.update`` setting whose meaning it
cannot keep (``duplex_setting``). Pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from msgspec import UNSET

from livegen.errors import RemoteProtocolError
from livegen.models.voice import OutputKind, VoiceOutput
from livegen.protocol.errors import DUPLEX_UNSUPPORTED
from livegen.protocol.realtime.fields import AudioInputShape, AudioShape, SessionShape
from livegen.protocol.realtime.session import CapabilitiesObject
from livegen.voice.chain import Effect, Send
from livegen.voice.config import Config
from livegen.voice.conversation import Conversation
from livegen.voice.options import plan_response, session_options
from livegen.voice.response import Response
from livegen.voice.settings import IdFactory, ModelFacts
from livegen.voice.turns import TurnPolicy


class Voice(Protocol):
    """What a model's own turn asks of the session's speaker (``output.Speaker``)."""

    @property
    def response(self) -> Response | None: ...

    def begin(self, response: Response) -> Send: ...

    def finish_now(self, now: float) -> list[Effect]: ...

    def on_output(self, response: Response, output: VoiceOutput, now: float) -> list[Effect]: ...


class Owner(Protocol):
    """What a model's own turn reads of its session (``session.Session``), and the barge-in it asks
    for; declared here, so this module never imports the session."""

    @property
    def speaker(self) -> Voice: ...

    @property
    def turns(self) -> TurnPolicy: ...

    @property
    def config(self) -> Config: ...

    @property
    def conversation(self) -> Conversation: ...

    @property
    def ids(self) -> IdFactory: ...

    @property
    def epoch(self) -> int: ...

    @property
    def model(self) -> ModelFacts: ...

    def barge_in(self, now: float) -> list[Effect]: ...


#: The outputs of a duplex model's own turns, which carry no response id.
TURN_KINDS = frozenset({OutputKind.AUDIO_DELTA, OutputKind.TEXT_DELTA, OutputKind.RESPONSE_DONE})

_VAD = "session.audio.input.turn_detection"


def on_turn_output(session: Owner, output: VoiceOutput, now: float) -> list[Effect]:
    """One output of the model's own turn (it passed the fence): begin, feed or end its response."""
    speaker = session.speaker
    response = speaker.response
    if output.kind is OutputKind.RESPONSE_DONE:
        if response is None:
            return []
        if session.turns.in_speech:  # the model stopped for the user: a barge-in, cut where heard
            return session.barge_in(now)
        return speaker.on_output(response, output, now)
    effects: list[Effect] = []
    if response is not None and response.model_status is not None:  # the last turn still ending
        effects += speaker.finish_now(now)
        response = None
    if response is None:
        config = session.config
        response, _ = plan_response(
            session_options(config),
            config,
            session.conversation,
            session.ids("resp"),
            session.epoch,
            session.model.output_rate,
        )
        effects.append(speaker.begin(response))
    return effects + speaker.on_output(response, output, now)


def capabilities(model: ModelFacts, resumable: bool) -> CapabilitiesObject:
    """What a session's model can do, for ``session.created`` (every voice model: cascade or native)."""
    is_duplex = model.is_duplex
    return CapabilitiesObject(
        duplex="native" if is_duplex else "cascade",
        resume=resumable,
        frame_ms=model.frame_ms if is_duplex else None,
        response_create=not is_duplex,
        model_initiated_responses=is_duplex,
    )


def refused_event(event_type: str) -> RemoteProtocolError:
    """A client event a duplex model cannot take, refused by name."""
    why = {
        "response.create": "a native duplex model speaks when it chooses; it takes no response requests",
        "conversation.item.create": "a native duplex model hears audio only; it takes no items",
    }[event_type]
    return DUPLEX_UNSUPPORTED.error(name=event_type, detail=why, param="type")


#: Why a duplex session's turn detection is not the client's: ``server_vad`` (or null, or
#: ``semantic_vad``) would say the server commits turns and asks for answers, which this model
#: never does; its speech detector only cuts it when the user talks over it (barge-in).
_OWN_TURNS = (
    "the model takes its turns itself (it answers when it chooses; its speech detector only"
    " cuts it when the user talks over it); turn detection cannot be set"
)


def _named_turn_detection(update: SessionShape) -> str | None:
    """The turn detection field an update names (GA or beta shape), or None."""
    audio = update.audio
    audio_in = audio.input if isinstance(audio, AudioShape) else UNSET
    if isinstance(audio_in, AudioInputShape) and audio_in.turn_detection is not UNSET:
        return _VAD
    return "session.turn_detection" if update.turn_detection is not UNSET else None


def _refuse(param: str, why: str) -> RemoteProtocolError:
    return DUPLEX_UNSUPPORTED.error(name=param, detail=why, param=param)


#: (param, whether the new configuration asks what the model cannot do, why), checked in order.
_SETTINGS: tuple[tuple[str, Callable[[Config, Config], Any], str], ...] = (
    ("session.type", lambda old, new: new.is_transcription, "a native duplex model always converses"),
    (
        "session.instructions",
        lambda old, new: new.instructions != old.instructions,
        "the model takes no instructions",
    ),
    (
        "session.output_modalities",
        lambda old, new: new.output_modalities != ("audio",),
        "the model always speaks",
    ),
    (
        "session.audio.output.voice",
        lambda old, new: new.voice != old.voice,
        "the model speaks in its own voice",
    ),
    ("session.tools", lambda old, new: bool(new.tools), "the model cannot call functions"),
    (
        "session.audio.input.transcription",
        lambda old, new: bool(new.transcription_model),
        "the model has no recogniser of the user's speech",
    ),
    (
        "session.audio.input.noise_reduction",
        lambda old, new: new.noise_reduction is not None,
        "the model hears the input as it is",
    ),
    (
        "session.reasoning",
        lambda old, new: new.reasoning_effort is not None,
        "the model does not reason in tokens",
    ),
)


def check_setting(old: Config, new: Config, update: SessionShape | None = None) -> None:
    """Refuse (``unsupported_parameter``, naming the field) an update a duplex model cannot honour:
    one that names turn detection at all (``update``: the event's payload), or asks what the
    model cannot do."""
    if update is not None and (param := _named_turn_detection(update)) is not None:
        raise _refuse(param, _OWN_TURNS)
    for param, asks_the_impossible, why in _SETTINGS:
        if asks_the_impossible(old, new):
            raise _refuse(param, why)


__all__ = ["TURN_KINDS", "capabilities", "check_setting", "on_turn_output", "refused_event"]
