"""The beta dialect of the Realtime API, for clients that ask for it.

Sessions speak the GA protocol; a client that connects with the header
``OpenAI-Beta: realtime=v1`` (or the browser subprotocol
``openai-beta.realtime-v1``) was written against the beta API, which named
several server events differently and kept session settings flat. Rather
than teach the session core two dialects, the runner passes each outgoing GA
event through ``to_beta`` at the edge: renamed events get their beta names,
``conversation.item.added`` is sent as beta's ``conversation.item.created``,
content parts and items get beta's part types, and the session object carries
the flat beta fields beside the GA ones; a transcription session's
``session.created``/``.updated`` are beta's ``transcription_session.created``/
``.updated``. Input needs no translation here: ``protocol/realtime/client.py`` and
``voice/config.py`` already accept beta input (``transcription_session.update``
included).

A transform on typed events (``server.py``): a renamed event becomes its
beta subclass (same fields, beta's tag), so beta is one more set of types, not
a rewrite of JSON. Pure functions; no I/O.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET

from livegen.protocol.realtime import server as ev
from livegen.protocol.realtime.items import (
    AudioPart,
    ContentPart,
    ItemObject,
    MessageItem,
    OutputAudioPart,
    OutputTextPart,
    TextPart,
)
from livegen.protocol.realtime.session import BetaSessionObject, SessionObject, TranscriptionSessionObject

BETA_HEADER = "openai-beta"
BETA_HEADER_VALUE = "realtime=v1"
BETA_SUBPROTOCOL = "openai-beta.realtime-v1"


class AudioDelta(ev.OutputAudioDelta, tag="response.audio.delta", kw_only=True):
    pass


class AudioDone(ev.OutputAudioDone, tag="response.audio.done", kw_only=True):
    pass


class AudioTranscriptDelta(
    ev.OutputAudioTranscriptDelta, tag="response.audio_transcript.delta", kw_only=True
):
    pass


class AudioTranscriptDone(ev.OutputAudioTranscriptDone, tag="response.audio_transcript.done", kw_only=True):
    pass


class TextDelta(ev.OutputTextDelta, tag="response.text.delta", kw_only=True):
    pass


class TextDone(ev.OutputTextDone, tag="response.text.done", kw_only=True):
    pass


class ItemCreated(ev.ItemAdded, tag="conversation.item.created", kw_only=True):
    pass


class TranscriptionSessionCreated(ev.SessionCreated, tag="transcription_session.created", kw_only=True):
    pass


class TranscriptionSessionUpdated(ev.SessionUpdated, tag="transcription_session.updated", kw_only=True):
    pass


#: GA server event -> the beta event of the same fields under beta's name.
BETA_EVENTS: dict[type[ev.ServerEvent], type[ev.ServerEvent]] = {
    ev.OutputAudioDelta: AudioDelta,
    ev.OutputAudioDone: AudioDone,
    ev.OutputAudioTranscriptDelta: AudioTranscriptDelta,
    ev.OutputAudioTranscriptDone: AudioTranscriptDone,
    ev.OutputTextDelta: TextDelta,
    ev.OutputTextDone: TextDone,
    ev.ItemAdded: ItemCreated,
}
#: GA server event type -> the beta name of the same event.
BETA_NAMES = {ev.type_of_class(ga): ev.type_of_class(beta) for ga, beta in BETA_EVENTS.items()}
_WITH_ITEM = (ev.ItemAdded, ev.ItemDone, ev.ItemRetrieved, ev.OutputItemAdded, ev.OutputItemDone)
_BETA_FORMATS = {"audio/pcm": "pcm16", "audio/pcmu": "g711_ulaw", "audio/pcma": "g711_alaw"}


def wants_beta(headers: dict[str, str], subprotocols: list[str]) -> bool:
    """Whether a connecting client asked for the beta dialect (header names lower-case)."""
    return BETA_HEADER_VALUE in headers.get(BETA_HEADER, "") or BETA_SUBPROTOCOL in subprotocols


def to_beta(event: ev.ServerEvent) -> ev.ServerEvent:
    """The beta form of one GA server event (the event itself when nothing differs)."""
    if isinstance(event, ev.SessionCreated | ev.SessionUpdated):
        return _session_event(event)
    beta = BETA_EVENTS.get(type(event))
    out = event if beta is None else _recast(event, beta)
    if isinstance(out, _WITH_ITEM):
        out = msgspec.structs.replace(out, item=_item(out.item))
    elif isinstance(out, ev.ContentPartAdded | ev.ContentPartDone):
        out = msgspec.structs.replace(out, part=_part(out.part))
    elif isinstance(out, ev.ResponseDone):
        output = [_item(item) for item in out.response.output]
        out = msgspec.structs.replace(out, response=msgspec.structs.replace(out.response, output=output))
    return out


def _recast(event: ev.ServerEvent, cls: type[ev.ServerEvent]) -> ev.ServerEvent:
    """``event``'s fields under another event type (a beta subclass, or its GA base)."""
    return cls(**{name: getattr(event, name) for name in event.__struct_fields__})


def _session_event(event: ev.SessionCreated | ev.SessionUpdated) -> ev.ServerEvent:
    session = event.session
    if isinstance(session, TranscriptionSessionObject):  # beta's own names for these
        is_created = isinstance(event, ev.SessionCreated)
        return _recast(event, TranscriptionSessionCreated if is_created else TranscriptionSessionUpdated)
    if isinstance(session, SessionObject) and not isinstance(session, BetaSessionObject):
        return msgspec.structs.replace(event, session=_session(session))
    return event


def _item(item: ItemObject) -> ItemObject:
    if not isinstance(item, MessageItem) or not item.content:
        return item
    return msgspec.structs.replace(item, content=[_part(part) for part in item.content])


def _part(part: ContentPart) -> ContentPart:
    if isinstance(part, OutputAudioPart):
        return AudioPart(part.transcript)
    if isinstance(part, OutputTextPart):
        return TextPart(part.text)
    return part


def _session(session: SessionObject) -> BetaSessionObject:
    """The GA session object with beta's flat fields added (a beta client reads those)."""
    audio_in, audio_out = session.audio.input, session.audio.output
    fields: dict[str, Any] = {name: getattr(session, name) for name in session.__struct_fields__}
    return BetaSessionObject(
        **fields,
        modalities=["text", "audio"] if "audio" in session.output_modalities else ["text"],
        voice=audio_out.voice,
        input_audio_format=_BETA_FORMATS.get(audio_in.format.type, "pcm16"),
        output_audio_format=_BETA_FORMATS.get(audio_out.format.type, "pcm16"),
        turn_detection=audio_in.turn_detection,
        input_audio_transcription=audio_in.transcription,
        input_audio_noise_reduction=audio_in.noise_reduction or UNSET,
    )
