"""A remote recogniser for the turn transcript: any OpenAI-compatible ``POST /v1/audio/transcriptions``.

``--asr-base-url`` sends each turn's audio (as the local recogniser would
hear it: 16 kHz mono, here as a WAV) with ``model``, ``language`` and
``prompt``, and ``stream=true``: a server that streams answers with
server-sent events (``transcript.text.delta`` ... ``transcript.text.done``),
one that does not with its JSON ``{"text": ...}``; one that refuses
``stream`` (400) is asked again without it, and from then on never with it.
Live captions stay with the local recogniser (cheap, cancelled as the user
speaks on); the transcript the answer is made from comes from the remote one.

A stage that cannot be reached, answers an error status or something that
is not a transcript, or takes longer than ``timeout_s`` plus the audio's own
length, fails with ``AsrUnavailable``: the turn's response ends ``failed``
with ``asr_unavailable``, and nothing else waits on it.
"""

from __future__ import annotations

import asyncio
import io
import json
import wave
from typing import Any

import numpy as np

from livegen.errors import AsrUnavailable
from livegen.models.cascade import asr, remote


class RemoteRecognizer:
    """Transcripts from ``stage``'s ``/audio/transcriptions``."""

    def __init__(self, stage: remote.Stage, model: str) -> None:
        self.stage = stage
        self.model = model
        #: Whether to ask for a streamed answer (off once the server refused it).
        self.streams = True

    async def transcribe(self, audio: np.ndarray, options: asr.Options) -> str:
        """``audio`` (float32 at 16 kHz) as text; raises ``AsrUnavailable``."""
        import httpx

        stage = self.stage
        url = stage.url("audio/transcriptions")
        wav = _wav(audio)
        try:
            async with asyncio.timeout(stage.timeout_s + len(audio) / asr.SAMPLE_RATE):
                text = await self._ask(wav, options, url)
        except (TimeoutError, httpx.TimeoutException):
            raise self._failed(f"the recogniser at {url} answered too slowly") from None
        except httpx.HTTPError as exc:
            raise self._failed(f"cannot reach the recogniser at {url}: {exc!r}") from None
        except AsrUnavailable as exc:
            raise self._failed(str(exc)) from None
        stage.succeeded()
        return text

    async def _ask(self, wav: bytes, options: asr.Options, url: str) -> str:
        fields = {"model": self.model, "response_format": "json"}
        if options.language:
            fields["language"] = options.language
        if options.prompt:
            fields["prompt"] = options.prompt
        if self.streams:
            status, text = await self._post(wav, {**fields, "stream": "true"}, url)
            if status != 400:
                return text
            self.streams = False  # the server has no streamed transcripts: ask plainly from now on
        return (await self._post(wav, fields, url))[1]

    async def _post(self, wav: bytes, fields: dict[str, str], url: str) -> tuple[int, str]:
        """(400, "") for a refusal of ``stream``; else the transcript, or ``AsrUnavailable``."""
        files = {"file": ("turn.wav", wav, "audio/wav")}
        async with self.stage.client().stream(
            "POST", "audio/transcriptions", data=fields, files=files
        ) as response:
            if response.status_code == 400 and "stream" in fields:
                return 400, ""
            if response.status_code != 200:
                detail = await remote.error_text(response)
                raise AsrUnavailable(f"the recogniser at {url} answered {response.status_code}: {detail}")
            media = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if media == "text/event-stream":
                return 200, await _streamed_text(response, url)
            body = b""
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > remote.MAX_TEXT_BYTES:
                    raise AsrUnavailable(f"the recogniser at {url} sent more than 1 MiB for one turn")
            return 200, _json_text(body, url)

    def _failed(self, reason: str) -> AsrUnavailable:
        self.stage.failed(reason)
        return AsrUnavailable(reason)


async def _streamed_text(response: Any, url: str) -> str:
    """The transcript of OpenAI's streamed events: ``transcript.text.done``'s, else the deltas joined."""
    deltas: list[str] = []
    read = 0
    async for line in response.aiter_lines():
        read += len(line)
        if read > remote.MAX_TEXT_BYTES:
            raise AsrUnavailable(f"the recogniser at {url} sent more than 1 MiB for one turn")
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        event = _json(data.encode(), url)
        kind = event.get("type")
        if kind == "transcript.text.delta" and isinstance(event.get("delta"), str):
            deltas.append(event["delta"])
        elif kind == "transcript.text.done" and isinstance(event.get("text"), str):
            return str(event["text"]).strip()
        elif kind == "error" or "error" in event:
            raise AsrUnavailable(f"the recogniser at {url} failed: {str(event.get('error'))[:300]}")
    if not deltas:
        raise AsrUnavailable(f"the recogniser at {url} ended its stream without a transcript")
    return "".join(deltas).strip()


def _json_text(body: bytes, url: str) -> str:
    text = _json(body, url).get("text")
    if not isinstance(text, str):
        raise AsrUnavailable(f"the recogniser at {url} answered without a text: {body[:200]!r}")
    return text.strip()


def _json(body: bytes, url: str) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except ValueError:
        raise AsrUnavailable(f"the recogniser at {url} answered garbage: {body[:200]!r}") from None
    if not isinstance(value, dict):
        raise AsrUnavailable(f"the recogniser at {url} answered garbage: {body[:200]!r}")
    return value


def _wav(audio: np.ndarray) -> bytes:
    """``audio`` (float32 in [-1, 1] at 16 kHz) as a WAV file of PCM16."""
    pcm = (np.clip(audio, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(asr.SAMPLE_RATE)
        writer.writeframes(pcm)
    return out.getvalue()
