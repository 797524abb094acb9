"""Translation sessions (``/v1/realtime/translations``): OpenAI's translation dialect over a voice session.

A translation session (the SDK's ``client.realtime.translations.connect``,
``session.type: "translation"``) streams a speaker's audio in and the same
words in ``audio.output.language`` out, as audio and transcript deltas. It has
its own small protocol: the client sends ``session.update``,
``session.input_audio_buffer.append`` and ``session.close``; the server sends
``session.created`` / ``.updated`` / ``.closed``,
``session.input_transcript.delta``, ``session.output_transcript.delta``,
``session.output_audio.delta`` and ``error``.

livegen serves it with an ordinary voice session and this dialect between the
two: the speech is recognised (server VAD ends each utterance), the language
model answers it under a fixed instruction ("translate into <language>, output
only the translation") and the answer is spoken in the session's voice. The
dialect turns the client's events into Realtime ones and the session's events
into the translation ones, dropping the rest (a translation client has no
responses nor items). Without a language model there is nothing to translate
with, so the transport refuses the session (``protocol.errors.NO_LANGUAGE_MODEL``).

A translation that fails (the language model answers 500, says nothing by its
first-token deadline, calls a tool, sends too much; a speech stage fails) is a
response that ends ``failed``: the client hears of it as an ``error`` with the
voice sessions' code (``llm_failed``, ``llm_timeout``, ``llm_invalid_tool_call``,
``llm_output_too_large``...), never silence, and the session goes on. A
translation is capped as a response is, at ``MAX_TRANSLATION_TOKENS`` (a model
that ignores the cap is cut at as many words), so endless text is never spoken
without bound.

Sans-IO: JSON objects in, JSON objects out; the transport
(``server/realtime/translation.py``) moves them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from livegen.errors import RemoteProtocolError
from livegen.protocol import errors as wire_errors

#: The target language until the client names one (a key may be minted with another).
DEFAULT_LANGUAGE = "en"
#: The language model's whole brief: a translation is a reply under this instruction.
INSTRUCTIONS = (
    "You are a simultaneous interpreter. Translate what the user says into the language {language}. "
    "Output only the translation: no answer, no comment, no quotes, no notes."
)
#: What the translation dialect's clients may send (OpenAI's list, for an unknown type).
CLIENT_EVENTS = ("session.update", "session.input_audio_buffer.append", "session.close")
NOISE_REDUCTION_TYPES = ("near_field", "far_field")
#: One translation's ``max_output_tokens``: about a minute of speech, more than an utterance
#: that server VAD ends at its pauses says.
MAX_TRANSLATION_TOKENS = 160


def _object(value: object, param: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise wire_errors.INVALID_TYPE.error(detail=f"{param} must be an object", param=param)
    return value


def _nullable(value: object, param: str) -> dict[str, Any] | None:
    """An object that may be ``null`` (off), but not empty: then it lacks its required fields."""
    return None if value is None else _object(value, param)


@dataclass
class TranslationConfig:
    """What a translation session is set to: its target language and optional input settings."""

    language: str = DEFAULT_LANGUAGE
    #: ``{"model": ...}``: source-language transcript deltas are sent when set.
    transcription: dict[str, Any] | None = None
    noise_reduction: dict[str, Any] | None = None

    def apply(self, session: object, prefix: str = "session") -> None:
        """A ``session.update``'s (or a key's) ``session`` object: only ``audio`` may change. All of
        it is checked before any of it is applied: a refused update changes nothing."""
        audio = _object(_object(session, prefix).get("audio"), f"{prefix}.audio")
        output = _object(audio.get("output"), f"{prefix}.audio.output")
        audio_in = _object(audio.get("input"), f"{prefix}.audio.input")
        language = output.get("language", self.language)
        if not isinstance(language, str) or not language.strip() or len(language) > 64:
            detail = "audio.output.language must be a language name or code (1 to 64 characters)"
            raise wire_errors.INVALID_VALUE.error(detail=detail, param=f"{prefix}.audio.output.language")
        param = f"{prefix}.audio.input.transcription"
        transcription = _nullable(audio_in.get("transcription", self.transcription), param)
        if transcription is not None and not isinstance(transcription.get("model"), str):
            detail = "audio.input.transcription.model must be a string"
            raise wire_errors.INVALID_VALUE.error(detail=detail, param=f"{param}.model")
        param = f"{prefix}.audio.input.noise_reduction"
        noise = _nullable(audio_in.get("noise_reduction", self.noise_reduction), param)
        if noise is not None and noise.get("type") not in NOISE_REDUCTION_TYPES:
            detail = "audio.input.noise_reduction.type must be 'near_field' or 'far_field'"
            raise wire_errors.INVALID_VALUE.error(detail=detail, param=f"{param}.type")
        self.language, self.transcription, self.noise_reduction = language.strip(), transcription, noise

    def realtime_session(self) -> dict[str, Any]:
        """The voice session's configuration that carries out this translation."""
        audio_in: dict[str, Any] = {
            "turn_detection": {"type": "server_vad", "create_response": True, "interrupt_response": False},
            "transcription": {"model": self.transcription["model"]} if self.transcription else None,
            "noise_reduction": {"type": self.noise_reduction["type"]} if self.noise_reduction else None,
        }
        return {
            "type": "realtime",
            "instructions": INSTRUCTIONS.format(language=self.language),
            "output_modalities": ["audio"],
            "max_output_tokens": MAX_TRANSLATION_TOKENS,
            "audio": {"input": audio_in},
        }


@dataclass
class TranslationDialect:
    """One translation session's two sides: client events in, the voice session's events out."""

    session_id: str
    model: str
    config: TranslationConfig = field(default_factory=TranslationConfig)
    expires_at: int = 0
    #: ``session.update``s this dialect sent itself, whose ``session.updated`` the client never asked for.
    _own_updates: int = 0
    #: Responses (translations) under way: ``session.close`` waits for them to be spoken.
    responses: int = 0
    closed: bool = False

    def opening(self) -> str:
        """The ``session.update`` that turns the new voice session into this translation."""
        self._own_updates += 1
        return json.dumps({"type": "session.update", "session": self.config.realtime_session()})

    def session(self) -> dict[str, Any]:
        """The session object (the SDK's ``RealtimeTranslationSession``)."""
        audio_in: dict[str, Any] = {}
        if self.config.transcription is not None:
            audio_in["transcription"] = {"model": self.config.transcription["model"]}
        if self.config.noise_reduction is not None:
            audio_in["noise_reduction"] = self.config.noise_reduction
        return {
            "id": self.session_id,
            "type": "translation",
            "model": self.model,
            "expires_at": self.expires_at,
            "audio": {"input": audio_in, "output": {"language": self.config.language}},
        }

    def inbound(self, text: str) -> str | None:
        """A client message as the voice session's event; None for ``session.close`` (the
        transport flushes and closes). Raises the client's error for a bad one."""
        try:
            event = json.loads(text)
        except ValueError as exc:
            raise wire_errors.INVALID_JSON.error(detail=str(exc)) from None
        if not isinstance(event, dict):
            raise wire_errors.INVALID_EVENT.error(detail="an event is a JSON object")
        kind, event_id = event.get("type"), event.get("event_id")
        if kind == "session.input_audio_buffer.append":
            audio = {"type": "input_audio_buffer.append", "audio": event.get("audio")}
            return json.dumps({**audio, **({"event_id": event_id} if event_id else {})})
        if kind == "session.update":
            try:
                self.config.apply(event.get("session"))
            except RemoteProtocolError as error:
                error.event_id = event_id
                raise
            update = {"type": "session.update", "session": self.config.realtime_session()}
            return json.dumps({**update, **({"event_id": event_id} if event_id else {})})
        if kind == "session.close":
            return None
        supported = ", ".join(repr(k) for k in CLIENT_EVENTS)
        raise wire_errors.UNKNOWN_EVENT_TYPE.error(event_type=kind, supported=supported, event_id=event_id)

    def outbound(self, text: str) -> list[dict[str, Any]]:
        """A voice session's event as the translation events it makes (often none)."""
        event = json.loads(text)
        kind = event.get("type")
        event_id = str(event.get("event_id") or "")
        if kind in ("session.created", "session.updated"):
            expires = (event.get("session") or {}).get("expires_at")
            self.expires_at = int(expires) if isinstance(expires, int | float) else self.expires_at
            if kind == "session.updated" and self._own_updates > 0:
                self._own_updates -= 1
                return []
            return [{"type": kind, "event_id": event_id, "session": self.session()}]
        if kind == "response.created":
            self.responses += 1
        elif kind == "response.done":
            self.responses = max(0, self.responses - 1)
            return _failure(event_id, event.get("response") or {})
        return self._stream(kind, event_id, event)

    def _stream(self, kind: str, event_id: str, event: dict[str, Any]) -> list[dict[str, Any]]:
        if kind == "error":
            return [event]
        if kind == "response.output_audio.delta":
            audio = {"delta": event["delta"], "format": "pcm16", "sample_rate": 24_000, "channels": 1}
            return [{"type": "session.output_audio.delta", "event_id": event_id, **audio}]
        if kind == "response.output_audio_transcript.delta":
            return [
                {"type": "session.output_transcript.delta", "event_id": event_id, "delta": event["delta"]}
            ]
        if kind == "conversation.item.input_audio_transcription.delta" and self.config.transcription:
            return [{"type": "session.input_transcript.delta", "event_id": event_id, "delta": event["delta"]}]
        if kind == "session.closed":
            return self.closing(event_id)
        return []

    def closing(self, event_id: str) -> list[dict[str, Any]]:
        """``session.closed``, once."""
        if self.closed:
            return []
        self.closed = True
        return [{"type": "session.closed", "event_id": event_id or "event_closed"}]


def _failure(event_id: str, response: dict[str, Any]) -> list[dict[str, Any]]:
    """A failed translation's ``error``, in the code and words of the response's own failure."""
    if response.get("status") != "failed":
        return []
    failed = (response.get("status_details") or {}).get("error") or {}
    error = {
        "type": failed.get("type") or "server_error",
        "code": failed.get("code") or "model_failed",
        "message": failed.get("message") or "the translation failed",
        "param": None,
        "event_id": None,
    }
    return [{"type": "error", "event_id": event_id or "event_failed", "error": error}]
