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
``.updated``. Input needs no translation here: ``protocol/realtime.py`` and
``voice/config.py`` already accept beta input (``transcription_session.update``
included).

Pure functions over event dicts: no I/O.
"""

from __future__ import annotations

from typing import Any

BETA_HEADER = "openai-beta"
BETA_HEADER_VALUE = "realtime=v1"
BETA_SUBPROTOCOL = "openai-beta.realtime-v1"

#: GA server event type -> the beta name of the same event.
BETA_NAMES = {
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "response.output_text.delta": "response.text.delta",
    "response.output_text.done": "response.text.done",
    "conversation.item.added": "conversation.item.created",
}
_PART_TYPES = {"output_audio": "audio", "output_text": "text"}
_BETA_FORMATS = {"audio/pcm": "pcm16", "audio/pcmu": "g711_ulaw", "audio/pcma": "g711_alaw"}


def wants_beta(headers: dict[str, str], subprotocols: list[str]) -> bool:
    """Whether a connecting client asked for the beta dialect (header names lower-case)."""
    return BETA_HEADER_VALUE in headers.get(BETA_HEADER, "") or BETA_SUBPROTOCOL in subprotocols


def to_beta(event: dict[str, Any]) -> dict[str, Any]:
    """The beta form of one GA server event (the event itself when nothing differs)."""
    kind = event["type"]
    if kind in ("session.created", "session.updated"):
        if event["session"].get("type") == "transcription":  # beta's own names for these
            return {**event, "type": kind.replace("session.", "transcription_session.")}
        return {**event, "session": _session(event["session"])}
    renamed = BETA_NAMES.get(kind, kind)
    out = event if renamed == kind else {**event, "type": renamed}
    if "item" in out:
        out = {**out, "item": _item(out["item"])}
    if "part" in out:
        out = {**out, "part": _part(out["part"])}
    if kind == "response.done":
        response = out["response"]
        out = {**out, "response": {**response, "output": [_item(i) for i in response.get("output", [])]}}
    return out


def _item(item: dict[str, Any]) -> dict[str, Any]:
    content = item.get("content")
    if not content:
        return item
    return {**item, "content": [_part(p) for p in content]}


def _part(part: dict[str, Any]) -> dict[str, Any]:
    beta = _PART_TYPES.get(part.get("type", ""))
    return part if beta is None else {**part, "type": beta}


def _session(session: dict[str, Any]) -> dict[str, Any]:
    """The GA session object with beta's flat fields added (a beta client reads those)."""
    audio_in = session.get("audio", {}).get("input", {})
    audio_out = session.get("audio", {}).get("output", {})
    flat: dict[str, Any] = {
        "modalities": ["text", "audio"] if "audio" in session.get("output_modalities", []) else ["text"],
        "voice": audio_out.get("voice"),
        "input_audio_format": _format(audio_in.get("format")),
        "output_audio_format": _format(audio_out.get("format")),
        "turn_detection": audio_in.get("turn_detection"),
        "input_audio_transcription": audio_in.get("transcription"),
        "input_audio_noise_reduction": audio_in.get("noise_reduction"),
    }
    return {**session, **flat}


def _format(value: dict[str, Any] | None) -> str | None:
    return None if value is None else _BETA_FORMATS.get(value.get("type", ""), "pcm16")
