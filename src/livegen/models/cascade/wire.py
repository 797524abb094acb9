"""The frames between livegen and its speech-synthesis worker: a JSON header and a byte payload.

The synthesisers (Piper, espeak-ng) are GPL, so they run in a separate process
(``tts_worker``) and livegen talks to it over the worker's stdin and stdout.
A frame is ``u32 header length, header JSON, u32 payload length, payload``,
big-endian: self-delimiting, so either side can read it from a blocking pipe
without a parser state, and PCM travels without base64. Both sides import
this module and nothing else of each other.
"""

from __future__ import annotations

import json
import struct
from typing import IO, Any

_LENGTH = struct.Struct(">I")
#: Frames larger than this are a broken peer, not a long sentence (64 MiB is ~20 min of 24 kHz PCM16).
MAX_FRAME_BYTES = 64 * 1024 * 1024


class FrameError(Exception):
    """The pipe ended or carried something that is not a frame."""


def encode_frame(header: dict[str, Any], payload: bytes = b"") -> bytes:
    body = json.dumps(header, separators=(",", ":")).encode()
    return _LENGTH.pack(len(body)) + body + _LENGTH.pack(len(payload)) + payload


def write_frame(stream: IO[bytes], header: dict[str, Any], payload: bytes = b"") -> None:
    stream.write(encode_frame(header, payload))
    stream.flush()


def read_frame(stream: IO[bytes]) -> tuple[dict[str, Any], bytes]:
    """The next frame; raises ``FrameError`` at end of stream or on garbage."""
    header = json.loads(_read_block(stream))
    if not isinstance(header, dict):
        raise FrameError(f"frame header is a {type(header).__name__}, not an object")
    return header, _read_block(stream)


def _read_block(stream: IO[bytes]) -> bytes:
    (size,) = _LENGTH.unpack(_read_exactly(stream, _LENGTH.size))
    if size > MAX_FRAME_BYTES:
        raise FrameError(f"frame of {size} bytes is over the {MAX_FRAME_BYTES} byte limit")
    return _read_exactly(stream, size)


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise FrameError("the pipe closed mid-frame" if data else "the pipe closed")
        data += chunk
    return data
