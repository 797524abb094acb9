"""What a ``/v1/audio/*`` request asks for, checked field by field, and its refusals in OpenAI's shape.

Every refusal is an ``AudioError``: an HTTP status and OpenAI's error object
(``{"error": {message, type, param, code}}``), the offending field in
``param``, and OpenAI's words where OpenAI has them ("Invalid value: 'x'.
Supported values are: ...", "Missing required parameter: 'file'.", "The model
`x` does not exist or you do not have access to it."). A model or voice name
the server does not serve is refused by name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import FormData

from livegen.errors import LivegenError
from livegen.models.voice import ClipAudio, is_openai_transcription_model
from livegen.protocol import errors as wire_errors

#: OpenAI's speech models: each means the voice model's speech.
OPENAI_SPEECH_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-12-15")
#: OpenAI's built-in voices: the voice model maps each to a voice of its own.
OPENAI_VOICES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse", "marin",
    "cedar",
)  # fmt: skip
TRANSCRIPTION_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
#: OpenAI's bound on ``input``.
MAX_INPUT_CHARS = 4096
#: Whisper hears at most 224 tokens of context (livegen gives it 100): a longer prompt keeps its end.
MAX_PROMPT_CHARS = 1000
SPEED_RANGE = (0.25, 4.0)


class AudioError(LivegenError):
    """A refused audio request: an HTTP status and OpenAI's error object."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = "invalid_value",
        error_type: str = "invalid_request_error",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.error_type, self.headers = error_type, headers

    def body(self) -> dict[str, Any]:
        return {"message": self.message, "type": self.error_type, "param": self.param, "code": self.code}


def unsupported(param: str, value: object, supported: tuple[str, ...]) -> AudioError:
    """OpenAI's words for a value not among those allowed."""
    listed = ", ".join(f"'{name}'" for name in supported)
    return AudioError(400, f"Invalid value: '{value}'. Supported values are: {listed}.", param=param)


def missing(param: str) -> AudioError:
    message = wire_errors.MISSING_REQUIRED_PARAMETER.text(name=param)
    return AudioError(400, message, param=param, code="missing_required_parameter")


def model_not_found(name: str) -> AudioError:
    message = wire_errors.MODEL_NOT_FOUND.text(model=name)
    return AudioError(404, message, param="model", code="model_not_found")


def _flag(value: str, param: str) -> bool:
    if value.lower() in ("true", "1"):
        return True
    if value.lower() in ("false", "0", ""):
        return False
    raise AudioError(400, f"Invalid value for '{param}': expected a boolean, got '{value}'.", param=param)


def _number(value: object, param: str, low: float, high: float) -> float:
    try:
        number = (
            float(value) if isinstance(value, int | float | str) and not isinstance(value, bool) else None
        )
    except ValueError:
        number = None
    if number is None or not math.isfinite(number) or not low <= number <= high:
        message = f"Invalid value for '{param}': expected a number from {low:g} to {high:g}, got '{value}'."
        raise AudioError(400, message, param=param)
    return number


@dataclass(frozen=True)
class TranscriptionRequest:
    #: The recogniser to use: one of the model's names, or "" for its default.
    recogniser: str
    response_format: str
    language: str
    prompt: str
    stream: bool
    #: ``include[]=logprobs``: the text's tokens with their log probabilities (json and the stream).
    logprobs: bool = False

    @classmethod
    def parse(cls, form: FormData, recognisers: tuple[str, ...]) -> TranscriptionRequest:
        fields = {key: value for key, value in form.multi_items() if isinstance(value, str)}
        model = fields.get("model")
        if not model:
            raise missing("model")
        if model not in recognisers and not is_openai_transcription_model(model):
            raise model_not_found(model)
        response_format = fields.get("response_format") or "json"
        if response_format not in TRANSCRIPTION_FORMATS:
            raise unsupported("response_format", response_format, TRANSCRIPTION_FORMATS)
        language = fields.get("language", "").strip()
        if language and not (language.isalpha() and 2 <= len(language) <= 3):
            message = (
                f"Invalid language '{language}'. Language parameter must be specified in ISO-639-1 format."
            )
            raise AudioError(400, message, param="language")
        if "temperature" in fields:
            _number(fields["temperature"], "temperature", 0.0, 1.0)  # taken; decoding is never sampled
        granularities = form.getlist("timestamp_granularities[]")
        if "word" in granularities:
            raise unsupported("timestamp_granularities", "word", ("segment",))
        include = form.getlist("include[]") or form.getlist("include")
        if unknown := [value for value in include if value != "logprobs"]:
            raise unsupported("include", unknown[0], ("logprobs",))
        if include and response_format != "json":
            message = "logprobs are only returned with response_format 'json'."
            raise AudioError(400, message, param="include")
        stream = _flag(fields.get("stream", ""), "stream")
        if stream and response_format not in ("json", "text"):
            message = (
                f"Streaming is not supported with response_format '{response_format}'; use json or text."
            )
            raise AudioError(400, message, param="stream")
        return cls(
            model if model in recognisers else "",
            response_format,
            language.lower(),
            fields.get("prompt", "")[-MAX_PROMPT_CHARS:],
            stream,
            bool(include),
        )


@dataclass(frozen=True)
class SpeechRequest:
    text: str
    #: The model's own voice name, or "" for its default.
    voice: str
    response_format: str
    speed: float
    stream_format: str

    @classmethod
    def parse(
        cls, body: dict[str, Any], model: ClipAudio, served: tuple[str, ...], formats: tuple[str, ...]
    ) -> SpeechRequest:
        name = body.get("model")
        if not isinstance(name, str) or not name:
            raise missing("model")
        if name not in OPENAI_SPEECH_MODELS and name not in served:
            raise model_not_found(name)
        text = body.get("input")
        if not isinstance(text, str) or not text.strip():
            raise missing("input")
        if len(text) > MAX_INPUT_CHARS:
            message = f"'input' is too long: {len(text)} characters; at most {MAX_INPUT_CHARS}."
            raise AudioError(400, message, param="input", code="string_above_max_length")
        response_format = body.get("response_format") or "mp3"
        if response_format not in formats:
            raise unsupported("response_format", response_format, formats)
        stream_format = body.get("stream_format") or "audio"
        if stream_format not in ("audio", "sse"):
            raise unsupported("stream_format", stream_format, ("audio", "sse"))
        speed = _number(body.get("speed", 1.0), "speed", *SPEED_RANGE)
        return cls(text, _voice(body.get("voice"), model), response_format, speed, stream_format)


def _voice(voice: object, model: ClipAudio) -> str:
    """The voice's name (a name, or OpenAI's ``{"id": name}``): one of OpenAI's, each of which the
    model maps to a voice of its own, or the model's own."""
    if isinstance(voice, dict):
        voice = voice.get("id")
    if not isinstance(voice, str) or not voice:
        raise missing("voice")
    if voice in OPENAI_VOICES or model.accepts_voice(voice):
        return voice
    raise unsupported("voice", voice, OPENAI_VOICES)
