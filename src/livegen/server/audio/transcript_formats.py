"""A clip's transcript in each of OpenAI's ``response_format`` shapes, and as server-sent events.

``json`` is ``{"text", "usage"}``; ``text`` the bare text; ``verbose_json``
adds ``task``, ``language``, ``duration`` and ``segments`` (one per piece the
recogniser heard, with its start and end, ``compression_ratio`` as Whisper
computes it; Whisper's ``avg_logprob`` and ``no_speech_prob`` are not kept by
livegen's decoder and read 0); ``srt`` and ``vtt`` are subtitles of the same
segments. Usage is the audio's duration in seconds (OpenAI's ``whisper-1``
usage), and in tokens on the stream's last event (its shape there): the
recogniser's audio positions and prompt, and the tokens of the text.

Streamed (``stream=true``), each segment is a ``transcript.text.delta`` as
soon as it is decoded, then ``transcript.text.done`` carries the whole text.
With ``include[]=logprobs`` (json only), the text's tokens and their log
probabilities come in ``logprobs``, on each delta and on the whole.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from starlette.responses import JSONResponse, PlainTextResponse, Response

from livegen.models.voice import ClipSegment

#: What OpenAI reports as ``language`` when English was heard (it names languages in words).
_LANGUAGE_NAMES = {"": "english", "en": "english"}


def joined(segments: Sequence[ClipSegment]) -> str:
    return " ".join(segment.text for segment in segments if segment.text)


def response(
    response_format: str, segments: Sequence[ClipSegment], duration: float, language: str
) -> Response:
    text = joined(segments)
    usage = {"type": "duration", "seconds": round(duration, 3)}
    if response_format == "text":
        return PlainTextResponse(text + "\n")
    if response_format in ("srt", "vtt"):
        return PlainTextResponse(subtitles(segments, response_format), media_type="text/plain")
    if response_format == "verbose_json":
        body = {
            "task": "transcribe",
            "language": _LANGUAGE_NAMES.get(language, language),
            "duration": round(duration, 3),
            "text": text,
            "segments": [segment_object(i, s) for i, s in enumerate(segments)],
            "usage": usage,
        }
        return JSONResponse(body)
    body = {"text": text, "usage": usage}
    if any(segment.logprobs is not None for segment in segments):
        body["logprobs"] = all_logprobs(segments)
    return JSONResponse(body)


def all_logprobs(segments: Sequence[ClipSegment]) -> list[Any]:
    return [entry for segment in segments for entry in segment.logprobs or ()]


def segment_object(index: int, segment: ClipSegment) -> dict[str, Any]:
    encoded = segment.text.encode()
    return {
        "id": index,
        "seek": int(segment.start * 100),  # Whisper's 10 ms frames
        "start": round(segment.start, 3),
        "end": round(segment.end, 3),
        "text": segment.text,
        "tokens": [],
        "temperature": 0.0,
        "avg_logprob": 0.0,
        "compression_ratio": round(len(encoded) / max(1, len(zlib.compress(encoded))), 3),
        "no_speech_prob": 0.0,
    }


def subtitles(segments: Sequence[ClipSegment], kind: str) -> str:
    separator = "," if kind == "srt" else "."
    cues = []
    for index, segment in enumerate(segments, start=1):
        timing = f"{_stamp(segment.start, separator)} --> {_stamp(segment.end, separator)}"
        cues.append(
            f"{index}\n{timing}\n{segment.text}\n" if kind == "srt" else f"{timing}\n{segment.text}\n"
        )
    body = "\n".join(cues)
    return body if kind == "srt" else f"WEBVTT\n\n{body}"


def _stamp(seconds: float, separator: str) -> str:
    millis = round(seconds * 1000)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    whole, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{whole:02d}{separator}{millis:03d}"


async def events(segments: AsyncIterator[ClipSegment]) -> AsyncIterator[dict[str, Any]]:
    """``transcript.text.delta`` per segment as it comes, then ``transcript.text.done`` with usage."""
    heard: list[ClipSegment] = []
    async for segment in segments:
        delta = segment.text if not heard else " " + segment.text
        heard.append(segment)
        event: dict[str, Any] = {"type": "transcript.text.delta", "delta": delta}
        if segment.logprobs is not None:
            event["logprobs"] = list(segment.logprobs)
        yield event
    audio_tokens = sum(segment.audio_tokens for segment in heard)
    prompt_tokens = sum(segment.prompt_tokens for segment in heard)
    input_tokens = audio_tokens + prompt_tokens
    output_tokens = sum(segment.output_tokens for segment in heard)
    usage = {
        "type": "tokens",
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
        "input_token_details": {"audio_tokens": audio_tokens, "text_tokens": prompt_tokens},
    }
    done: dict[str, Any] = {"type": "transcript.text.done", "text": joined(heard), "usage": usage}
    if any(segment.logprobs is not None for segment in heard):
        done["logprobs"] = all_logprobs(heard)
    yield done
