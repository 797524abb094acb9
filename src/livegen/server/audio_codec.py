"""Audio files in and out of ``/v1/audio/*``: uploads decoded to PCM16, speech encoded as it streams.

Uploads (wav, mp3, flac, ogg, webm, m4a...) are decoded and resampled to the
model's rate by PyAV (FFmpeg; it comes with aiortc, the ``webrtc`` extra);
without PyAV only WAV is read (the standard library's ``wave``, resampled by
soxr). Decoding stops as soon as the audio passes the duration cap, so a long
file costs no more than the cap. Both run in a worker thread (the caller's
``asyncio.to_thread``), never on the event loop.

Speech leaves as OpenAI sends it: ``pcm`` (PCM16 mono, 24 kHz) as is, ``wav``
with a header whose lengths say "unknown" (0xFFFFFFFF, as streaming WAV
writers do) since the length is not known when the first bytes go, and
``mp3``, ``opus`` (in Ogg), ``aac`` (ADTS) and ``flac`` through PyAV, each
sentence encoded as it comes and sent at once.
"""

from __future__ import annotations

import io
import struct
import wave
from typing import Any, Protocol

import numpy as np

#: OpenAI's list, in its own words' order, for the error that names what is accepted.
UPLOAD_FORMATS = ("flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav", "webm")
#: Speech formats: (container, codec) for PyAV; None where no encoder is needed.
SPEECH_FORMATS: dict[str, tuple[str, str] | None] = {
    "pcm": None,
    "wav": None,
    "mp3": ("mp3", "libmp3lame"),
    "opus": ("ogg", "libopus"),
    "aac": ("adts", "aac"),
    "flac": ("flac", "flac"),
}
MEDIA_TYPES = {
    "pcm": "audio/pcm",
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
}


class BadAudio(ValueError):
    """The upload is not audio this server can decode."""


class TooLong(ValueError):
    """The upload's audio is longer than the cap."""


def has_pyav() -> bool:
    try:
        import av  # noqa: F401
    except ImportError:
        return False
    return True


def decode(data: bytes, rate: int, max_seconds: float) -> bytes:
    """PCM16 mono at ``rate`` of an audio file; ``BadAudio`` or ``TooLong`` if it cannot be had."""
    if has_pyav():
        return _decode_pyav(data, rate, int(max_seconds * rate))
    return _decode_wav(data, rate, int(max_seconds * rate))


def _decode_pyav(data: bytes, rate: int, max_samples: int) -> bytes:
    import av

    chunks: list[bytes] = []
    num_samples = 0
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            streams = [s for s in container.streams if s.type == "audio"]
            if not streams:
                raise BadAudio("the file has no audio stream")
            resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
            for frame in container.decode(streams[0]):
                if not isinstance(frame, av.AudioFrame):
                    continue
                for out in resampler.resample(frame):
                    chunks.append(out.to_ndarray().tobytes())
                    num_samples += out.samples
                if num_samples > max_samples:
                    raise TooLong(f"{num_samples / rate:.1f} s")
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().tobytes())
                num_samples += out.samples
    except (av.FFmpegError, StopIteration, ValueError, IndexError) as exc:
        if isinstance(exc, BadAudio | TooLong):
            raise
        raise BadAudio(str(exc)) from exc
    if num_samples > max_samples:
        raise TooLong(f"{num_samples / rate:.1f} s")
    return b"".join(chunks)


def _decode_wav(data: bytes, rate: int, max_samples: int) -> bytes:
    import soxr

    try:
        with wave.open(io.BytesIO(data), "rb") as reader:
            width, channels, source_rate = reader.getsampwidth(), reader.getnchannels(), reader.getframerate()
            if width != 2:
                raise BadAudio("only 16-bit WAV can be read without PyAV")
            # A streamed WAV's header may say 0xFFFFFFFF: read no more than the cap allows, and count.
            cap = int(max_samples * source_rate / rate) + 1
            frames = reader.readframes(min(reader.getnframes(), cap))
            if len(frames) // (2 * channels) >= cap:
                raise TooLong(f"more than {max_samples / rate:.1f} s")
    except (wave.Error, EOFError) as exc:
        raise BadAudio(f"{exc} (without PyAV only WAV can be read)") from exc
    samples = np.frombuffer(frames, "<i2").reshape(-1, channels).mean(axis=1) / 32768.0
    resampled = (
        soxr.resample(samples.astype(np.float32), source_rate, rate) if source_rate != rate else samples
    )
    return bytes((np.clip(resampled, -1, 1) * 32767).astype("<i2").tobytes())


def wav_header(rate: int) -> bytes:
    """A PCM16 mono WAV header for a stream of unknown length (RIFF and data sizes 0xFFFFFFFF)."""
    unknown = 0xFFFFFFFF
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    return (
        b"RIFF"
        + struct.pack("<I", unknown)
        + b"WAVEfmt "
        + struct.pack("<I", 16)
        + fmt
        + b"data"
        + struct.pack("<I", unknown)
    )


class Encoder(Protocol):
    def encode(self, pcm: bytes) -> bytes: ...

    def finish(self) -> bytes: ...


class RawEncoder:
    """``pcm`` and ``wav``: the samples as they are, after a header for WAV."""

    def __init__(self, header: bytes = b"") -> None:
        self._header = header

    def encode(self, pcm: bytes) -> bytes:
        header, self._header = self._header, b""
        return header + pcm

    def finish(self) -> bytes:
        return self._header


class _Sink(io.RawIOBase):
    """Where PyAV's muxer writes; ``take`` hands over what it wrote since the last call."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._chunks.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        taken, self._chunks = b"".join(self._chunks), []
        return taken


class PyAVEncoder:
    """One compressed stream (mp3, Ogg Opus, ADTS AAC, FLAC), encoded a piece at a time."""

    def __init__(self, container_format: str, codec: str, rate: int) -> None:
        import av

        self._rate = rate
        self._sink = _Sink()
        # Ogg holds a page back until it spans a second by default: a tenth lets the first sentence out.
        options = {"page_duration": "100000"} if container_format == "ogg" else {}
        self._container: Any = av.open(self._sink, mode="w", format=container_format, options=options)
        self._stream: Any = self._container.add_stream(codec, rate=rate, layout="mono")

    def encode(self, pcm: bytes) -> bytes:
        import av

        samples = np.frombuffer(pcm, "<i2").reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = self._rate
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        return self._sink.take()

    def finish(self) -> bytes:
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        return self._sink.take()


def encoder(response_format: str, rate: int) -> Encoder:
    """The encoder of a speech ``response_format`` (one of ``SPEECH_FORMATS`` this server can encode)."""
    spec = SPEECH_FORMATS[response_format]
    if spec is None:
        return RawEncoder(wav_header(rate) if response_format == "wav" else b"")
    return PyAVEncoder(spec[0], spec[1], rate)


def speech_formats() -> tuple[str, ...]:
    """The speech formats this server can send: all of OpenAI's with PyAV, else pcm and wav."""
    return tuple(SPEECH_FORMATS) if has_pyav() else ("pcm", "wav")
