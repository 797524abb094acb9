"""``/v1/audio/transcriptions`` and ``/v1/audio/speech``: OpenAI's audio endpoints, from the voice model.

The served voice model (when it implements ``models.voice.ClipAudio``, as the
cascade does) transcribes whole uploads and speaks text, so OpenAI's SDKs'
audio clients work unchanged and one livegen can be another's recogniser or
voice. Same API key as every route (``auth.py``), OpenAI's error shape and
status codes (``audio_requests.py`` checks the fields).

- Transcriptions take OpenAI's multipart form: ``file`` (OpenAI's formats
  only, each read by its own demuxer and nothing beside it, at 8-192 kHz: see
  ``audio_codec``), ``model`` (the model's recognisers by name;
  OpenAI's transcription names mean the server's default one),
  ``response_format`` (json, text, verbose_json, srt, vtt), ``language``,
  ``prompt`` (its end), ``temperature`` (taken; decoding is never sampled),
  and ``stream=true`` for server-sent ``transcript.text.delta`` events, one
  per piece (at most 30 s) as it is decoded, then ``transcript.text.done``.
- Speech takes OpenAI's JSON: ``model`` (OpenAI's speech names or the voice
  model's served names), ``voice`` (OpenAI's names, each mapped by the model
  to a distinct voice of its own, or the model's own), ``input`` (at most 4096 characters),
  ``response_format``, ``speed`` and ``stream_format`` (``audio`` or
  ``sse``). The audio streams a piece at a time as it is synthesised; the
  first piece is synthesised before the status line goes, so a voice the
  engine refuses is still a 400.

Limits: ``--max-audio-bytes`` per upload (413 past it; OpenAI's 25 MiB by
default), ``--max-audio-seconds`` of decoded audio (400), and
``--max-audio-requests`` served at once, each from when its request has been
read (a slow upload holds a connection, not the model) until its last byte is
sent (429 past it, at once, never queued); 503 while the voice model loads. Model
work runs where the model runs it (the recogniser's batcher, the speech
workers); decoding and encoding run in worker threads: nothing here blocks the
event loop. ``livegen_audio_requests`` counts answers by route and status.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.types import Message, Receive, Scope, Send

from livegen.errors import LivegenError
from livegen.logs import log_event
from livegen.models.voice import ClipAudio, ClipSegment
from livegen.protocol import errors as wire_errors
from livegen.server.audio import codec as audio_codec
from livegen.server.audio import transcript_formats
from livegen.server.audio.requests import AudioError, SpeechRequest, TranscriptionRequest, missing
from livegen.server.http.bodies import BodyRefused

if TYPE_CHECKING:
    from livegen.server.state import State

logger = logging.getLogger("livegen.server.audio")

#: Largest form field but the file (model, language, prompt...).
MAX_FIELD_BYTES = 64 * 1024
#: ``ModelError.code`` of a text or voice the speech engine refuses (the cascade's ``SynthesisError``):
#: the client's fault, unlike a speech worker that died.
SYNTHESIS_REFUSED = "speech_synthesis_failed"
#: Seconds a client is told to wait while the model loads.
RETRY_AFTER_S = 5

#: A route's work: the request, the loaded model, and what to release once the response is sent
#: or abandoned (its slot, the model's generator), in, and it returns the response.
Handler = Callable[[Request, ClipAudio, contextlib.AsyncExitStack], Awaitable[Response]]


def routes(state: State) -> list[BaseRoute]:
    """The audio routes, when the server has a voice model."""
    if state.voice_model is None:
        return []
    audio = AudioRoutes(state)
    return [
        Route(
            "/v1/audio/transcriptions",
            Endpoint(audio, "transcriptions", audio.transcriptions),
            methods=["POST"],
        ),
        Route("/v1/audio/speech", Endpoint(audio, "speech", audio.speech), methods=["POST"]),
    ]


class Endpoint:
    """One route as an ASGI app: the model's readiness, what the handler holds (its slot under the
    bound, taken once the request is read) until the response is sent or the client leaves,
    refusals as OpenAI errors, and the count."""

    def __init__(self, audio: AudioRoutes, name: str, handler: Handler) -> None:
        self.audio, self.name, self.handler = audio, name, handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            model = self.audio.model()
            async with contextlib.AsyncExitStack() as held:
                response = await self.handler(Request(scope, receive), model, held)
                await response(scope, receive, sending)
        except ClientDisconnect:  # gone mid-upload: nobody to answer, and its slot is free again
            log_event(logger, "audio.client_gone", logging.INFO, route=self.name)
            return
        except AudioError as error:
            log_event(
                logger, "audio.refused", logging.INFO, route=self.name, status=error.status, code=error.code
            )
            response = JSONResponse({"error": error.body()}, status_code=error.status, headers=error.headers)
            await response(scope, receive, send)
        except BodyRefused:  # too large or too slow: the body limits' own answer (server/http/bodies.py)
            raise
        except Exception:  # a bug: logged whole; the client gets OpenAI's shape if nothing was sent yet
            logger.exception("audio.internal_error route=%s", self.name)
            if started:
                raise
            failure = AudioError(500, "The server had an error while processing your request.", code=None)
            response = JSONResponse({"error": {**failure.body(), "type": "server_error"}}, status_code=500)
            await response(scope, receive, send)
        self.audio.requests.labels(route=self.name, code=str(response.status_code)).inc()


class AudioRoutes:
    """What both routes share: the model, the concurrency bound, the request counter."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.in_flight = 0
        self.requests = Counter(
            "livegen_audio_requests",
            "Requests to /v1/audio/ routes, by route and HTTP status",
            ["route", "code"],
            registry=state.metrics.registry,
        )

    def model(self) -> ClipAudio:
        """The served voice model, loaded; 503 while it loads (or if it failed to)."""
        state = self.state
        entry = state.voice_model
        if entry is None or not state.registry.is_loaded(entry.name):
            headers = {"Retry-After": str(RETRY_AFTER_S)}
            message = state.failed.get("voice") or wire_errors.MODEL_NOT_READY.text()
            raise AudioError(503, message, code="model_not_ready", error_type="server_error", headers=headers)
        model = state.registry.load(entry.name)  # loaded: this only looks it up
        if not isinstance(model, ClipAudio):
            raise AudioError(404, f"the voice model {entry.name!r} serves sessions only, not /v1/audio/")
        return model

    @contextlib.contextmanager
    def slot(self) -> Any:
        """One of ``--max-audio-requests``; 429 at once when none is free."""
        limit = self.state.config.max_audio_requests
        if self.in_flight >= limit:
            message = f"The server is serving {limit} audio requests (--max-audio-requests); retry shortly."
            raise AudioError(429, message, code="rate_limit_exceeded", error_type="requests")
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1

    # -- /v1/audio/transcriptions ---------------------------------------------------------------
    async def transcriptions(
        self, request: Request, model: ClipAudio, held: contextlib.AsyncExitStack
    ) -> Response:
        # The body's size (--max-audio-bytes) and time are bounded where it arrives (server/http/bodies.py).
        form = await read_form(request)
        try:
            ask = TranscriptionRequest.parse(form, model.transcription_models)
            upload = form.get("file")
            if not isinstance(upload, UploadFile):
                raise missing("file")
            held.enter_context(self.slot())  # only now: a slow upload holds a connection, not a slot
            data = await upload.read()
        finally:
            await form.close()
        pcm = await self.decode(data, model)
        duration = len(pcm) / 2 / model_rate(model, "input_rate")
        segments = model.transcribe_clip(pcm, ask.recogniser, ask.language, ask.prompt, ask.logprobs)
        held.push_async_callback(segments.aclose)
        if ask.stream:
            return stream_transcript(segments)
        try:
            found = [segment async for segment in segments]
        except LivegenError as error:
            raise AudioError(
                500, f"transcription failed: {error}", code=None, error_type="server_error"
            ) from None
        return transcript_formats.response(ask.response_format, found, duration, ask.language)

    async def decode(self, data: bytes, model: ClipAudio) -> bytes:
        max_s = self.state.config.max_audio_s
        try:
            return await asyncio.to_thread(audio_codec.decode, data, model_rate(model, "input_rate"), max_s)
        except audio_codec.TooLong as long:
            raise AudioError(
                400, f"The audio is too long ({long}); at most {max_s:g} s.", param="file"
            ) from None
        except audio_codec.BadAudio as bad:
            formats = ", ".join(f"'{name}'" for name in audio_codec.UPLOAD_FORMATS)
            message = f"Invalid file format. Supported formats: [{formats}] ({bad})"
            raise AudioError(400, message, param="file") from None

    # -- /v1/audio/speech -------------------------------------------------------------------------
    async def speech(self, request: Request, model: ClipAudio, held: contextlib.AsyncExitStack) -> Response:
        body = await read_json(request)
        entry = self.state.voice_model
        served = (*(() if entry is None else (entry.name,)), *self.state.config.served_model_names)
        ask = SpeechRequest.parse(body, model, served, audio_codec.speech_formats())
        held.enter_context(self.slot())
        pieces = model.speak_text(ask.text, ask.voice, ask.speed)
        held.push_async_callback(pieces.aclose)
        try:
            first = await anext(pieces, b"")
        except LivegenError as error:  # nothing was sent yet: a status can still say whose fault it is
            if getattr(error, "code", "") == SYNTHESIS_REFUSED:  # the engine refused the voice or text
                raise AudioError(400, str(error), param="voice") from None
            raise AudioError(
                500, f"speech synthesis failed: {error}", code=None, error_type="server_error"
            ) from None
        rate = model_rate(model, "output_rate")
        encoder = await asyncio.to_thread(audio_codec.encoder, ask.response_format, rate)

        async def audio() -> AsyncIterator[bytes]:
            yield await encode(encoder, first)
            try:
                async for pcm in pieces:
                    yield await encode(encoder, pcm)
            except LivegenError as error:  # the status line is gone: the audio ends short, and we say why
                log_event(logger, "audio.speech_failed", logging.ERROR, error=str(error))
                return
            yield await asyncio.to_thread(encoder.finish)

        if ask.stream_format == "sse":
            return StreamingResponse(sse_audio(audio()), media_type="text/event-stream")
        media_type = audio_codec.MEDIA_TYPES[ask.response_format]
        return StreamingResponse(audio(), media_type=media_type)


def stream_transcript(segments: AsyncGenerator[ClipSegment, None]) -> Response:
    """Server-sent events; a failure after the first event is an ``error`` event, as OpenAI's are."""

    async def events() -> AsyncIterator[str]:
        try:
            async for event in transcript_formats.events(segments):
                yield f"data: {json.dumps(event)}\n\n"
        except LivegenError as error:
            log_event(logger, "audio.transcription_failed", logging.ERROR, error=str(error))
            failure = AudioError(500, f"transcription failed: {error}", code=None, error_type="server_error")
            yield f"data: {json.dumps({'type': 'error', 'error': failure.body()})}\n\n"

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def encode(encoder: audio_codec.Encoder, pcm: bytes) -> bytes:
    if isinstance(encoder, audio_codec.RawEncoder):
        return encoder.encode(pcm)  # a header at most: no compute
    return await asyncio.to_thread(encoder.encode, pcm)


async def sse_audio(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """OpenAI's speech events: ``speech.audio.delta`` (base64 audio) as it comes, ``speech.audio.done``."""
    async for chunk in chunks:
        if chunk:
            delta = {"type": "speech.audio.delta", "audio": base64.b64encode(chunk).decode()}
            yield f"data: {json.dumps(delta)}\n\n"
    yield f"data: {json.dumps({'type': 'speech.audio.done'})}\n\n"


def model_rate(model: ClipAudio, which: str) -> int:
    """The model's ``input_rate`` or ``output_rate`` (a voice model's; ``ClipAudio`` alone has none)."""
    rate: int = getattr(model, which)
    return rate


async def read_form(request: Request) -> FormData:
    """The multipart form, its file spooled to disk past 1 MiB; 400 if malformed."""
    try:
        return await request.form(max_files=1, max_fields=64, max_part_size=MAX_FIELD_BYTES)
    except (HTTPException, MultiPartException) as bad:
        detail = getattr(bad, "detail", None) or getattr(bad, "message", str(bad))
        raise AudioError(
            400, f"The request body is not a valid multipart form: {detail}", code=None
        ) from None


async def read_json(request: Request) -> dict[str, Any]:
    raw = await request.body()  # at most MAX_SPEECH_BODY_BYTES (server/http/bodies.py)
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as bad:  # deep nesting: 400, never a 500
        raise AudioError(
            400, f"We could not parse the JSON body of your request. ({bad})", code=None
        ) from None
    if not isinstance(body, dict):
        raise AudioError(400, "The request body must be a JSON object.", code=None)
    return body
