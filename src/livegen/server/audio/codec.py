"""Audio files in and out of ``/v1/audio/*``: uploads decoded to PCM16, speech encoded as it streams.

Uploads (wav, mp3, flac, ogg, webm, m4a...) are decoded and resampled to the
model's rate by PyAV (FFmpeg; it comes with aiortc, the ``webrtc`` extra);
without PyAV only WAV is read (the standard library's ``wave``, resampled by
soxr). Both run in a worker thread (the caller's ``asyncio.to_thread``), never
on the event loop.

An upload is hostile until proven otherwise. FFmpeg left to probe would take a
text upload for an ``ffconcat`` or HLS playlist and open the files it names
(relative paths pass its safe mode): the server's own files, transcribed back
to the client. So the demuxer is chosen here from the file's first bytes, only
among those of OpenAI's formats (``DEMUXERS``), forced on FFmpeg, and kept to
that list (``format_whitelist``) with no protocol at all for anything it might
open beside the upload (``protocol_whitelist``); anything else is ``BadAudio``.
The cost is bounded on the source, before resampling: a sample rate outside
``SOURCE_RATES`` is refused (a WAV that claims 1 Hz would take minutes of CPU
to resample), and the duration cap is charged on the source's own samples, so
decoding stops as soon as the audio passes it and a long file costs no more
than the cap.

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


#: FFmpeg's demuxers for OpenAI's formats: wav; mp3 (mp3, mpga, mpeg audio); flac; ogg (ogg, oga);
#: matroska (webm); mov (mp4, m4a); mpeg (MPEG program streams).
DEMUXERS = ("wav", "mp3", "flac", "ogg", "matroska", "mov", "mpeg")
#: The sample rates an upload may have: telephone to studio.
SOURCE_RATES = (8_000, 192_000)
#: No demuxer may open anything but the upload itself: no FFmpeg protocol is named "none".
SAFE_OPTIONS = {
    "format_whitelist": ",".join(DEMUXERS),
    "protocol_whitelist": "none",
    "enable_drefs": "0",  # mov: never follow a track's reference to another file
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


def sniff(data: bytes) -> str | None:
    """The demuxer (one of ``DEMUXERS``) that the file's first bytes say it is written for; None
    for anything else (a playlist, an image, text)."""
    if data[:3] == b"ID3" and len(data) >= 10:  # an ID3v2 tag (before mp3, sometimes flac): skip it
        size = (data[6] & 0x7F) << 21 | (data[7] & 0x7F) << 14 | (data[8] & 0x7F) << 7 | data[9] & 0x7F
        return "flac" if data[10 + size : 14 + size] == b"fLaC" else "mp3"
    if data[:4] in (b"RIFF", b"RF64", b"BW64") and data[8:12] == b"WAVE":
        return "wav"
    if data[4:8] in (b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip"):
        return "mov"
    by_magic = {b"fLaC": "flac", b"OggS": "ogg", b"\x1a\x45\xdf\xa3": "matroska", b"\x00\x00\x01\xba": "mpeg"}
    if found := by_magic.get(data[:4]):
        return found
    # An MPEG audio frame's sync word, of layer I-III (layer bits 00 would be ADTS AAC, not ours).
    if len(data) >= 2 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0 and data[1] & 0x06:
        return "mp3"
    return None


def check_rate(source_rate: int) -> None:
    low, high = SOURCE_RATES
    if not low <= source_rate <= high:
        raise BadAudio(f"a sample rate of {source_rate} Hz; uploads are read from {low} to {high} Hz")


def _decode_pyav(data: bytes, rate: int, max_samples: int) -> bytes:
    import av

    demuxer = sniff(data)
    if demuxer is None:
        raise BadAudio("not a file of a supported format")
    try:
        with av.open(io.BytesIO(data), mode="r", format=demuxer, options=SAFE_OPTIONS) as container:
            return _decode_stream(container, rate, max_samples)
    except (av.FFmpegError, StopIteration, ValueError, IndexError) as exc:
        if isinstance(exc, BadAudio | TooLong):
            raise
        raise BadAudio(str(exc)) from exc


def _decode_stream(container: Any, rate: int, max_samples: int) -> bytes:
    """The first audio stream, resampled; each frame's rate checked and the cap charged on the
    source's seconds before a frame is resampled."""
    import av

    streams = [s for s in container.streams if s.type == "audio"]
    if not streams:
        raise BadAudio("the file has no audio stream")
    if streams[0].codec_context is None:  # a stream of a codec FFmpeg has no decoder for
        raise BadAudio("the file's audio cannot be decoded")
    check_rate(streams[0].codec_context.sample_rate)
    max_seconds = max_samples / rate
    resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
    chunks: list[bytes] = []
    source_seconds = 0.0
    for frame in container.decode(streams[0]):
        if not isinstance(frame, av.AudioFrame):
            continue
        check_rate(frame.sample_rate)  # a stream may change its rate midway (chained Ogg, mp3 frames)
        source_seconds += frame.samples / frame.sample_rate
        if source_seconds > max_seconds:
            raise TooLong(f"{source_seconds:.1f} s")
        chunks.extend(out.to_ndarray().tobytes() for out in resampler.resample(frame))
    chunks.extend(out.to_ndarray().tobytes() for out in resampler.resample(None))
    return b"".join(chunks)


def _decode_wav(data: bytes, rate: int, max_samples: int) -> bytes:
    import soxr

    try:
        with wave.open(io.BytesIO(data), "rb") as reader:
            width, channels, source_rate = reader.getsampwidth(), reader.getnchannels(), reader.getframerate()
            if width != 2:
                raise BadAudio("only 16-bit WAV can be read without PyAV")
            check_rate(source_rate)
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
