"""Wire audio formats and the conversions between them and a model's PCM16.

The wire carries ``audio/pcm`` (PCM16 little-endian mono, 24 kHz unless the
client names another rate), ``audio/pcmu`` (G.711 mu-law, 8 kHz) or
``audio/pcma`` (G.711 A-law, 8 kHz). A model takes and emits PCM16 at its own
rates. ``InputDecoder`` and ``OutputEncoder`` are per-session streams: the
resampler (soxr) keeps its filter state across chunks, so 20 ms appends
resample without clicks at chunk edges. The G.711 companding follows the
reference C code of the ITU (Sun's ``g711.c``) through 64 Ki/256-entry tables.

Pure computation, no I/O: the session core owns one decoder and one encoder.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import cache

import numpy as np
import numpy.typing as npt
import soxr

from livegen.protocol.errors import INVALID_AUDIO_FORMAT, INVALID_VALUE


class Encoding(StrEnum):
    PCM = "audio/pcm"
    PCMU = "audio/pcmu"
    PCMA = "audio/pcma"


#: Beta spellings of the formats, accepted on input.
BETA_FORMATS = {"pcm16": Encoding.PCM, "g711_ulaw": Encoding.PCMU, "g711_alaw": Encoding.PCMA}
DEFAULT_PCM_RATE = 24_000
G711_RATE = 8_000
MIN_RATE, MAX_RATE = 8_000, 192_000


@dataclass(frozen=True)
class AudioFormat:
    encoding: Encoding = Encoding.PCM
    rate: int = DEFAULT_PCM_RATE

    @property
    def bytes_per_sample(self) -> int:
        return 2 if self.encoding is Encoding.PCM else 1

    def to_wire(self) -> dict[str, object]:
        if self.encoding is Encoding.PCM:
            return {"type": self.encoding.value, "rate": self.rate}
        return {"type": self.encoding.value}

    def beta_name(self) -> str:
        return {Encoding.PCM: "pcm16", Encoding.PCMU: "g711_ulaw", Encoding.PCMA: "g711_alaw"}[self.encoding]


def parse_format(value: object, param: str) -> AudioFormat:
    """A GA format object ``{type, rate}`` or a beta string (``pcm16``, ``g711_ulaw``, ...)."""
    if isinstance(value, str):
        if value in BETA_FORMATS:
            encoding = BETA_FORMATS[value]
            return AudioFormat(encoding, DEFAULT_PCM_RATE if encoding is Encoding.PCM else G711_RATE)
        value = {"type": value}
    if not isinstance(value, dict):
        raise INVALID_VALUE.error(
            detail=f"{param} must be an object like {{'type': 'audio/pcm'}}", param=param
        )
    return format_of(value.get("type", Encoding.PCM.value), value.get("rate", DEFAULT_PCM_RATE), param)


_ENCODINGS = {e.value: e for e in Encoding}


def format_of(kind: object, rate: object, param: str) -> AudioFormat:
    """The format a GA format object's ``type`` and ``rate`` name (either may be any JSON value)."""
    encoding = _ENCODINGS.get(kind) if isinstance(kind, str) else None
    if encoding is None:
        allowed = ", ".join(e.value for e in Encoding)
        detail = f"unsupported audio format {kind!r}; expected one of {allowed}"
        raise INVALID_AUDIO_FORMAT.error(detail=detail, param=f"{param}.type")
    if encoding is not Encoding.PCM:
        return AudioFormat(encoding, G711_RATE)
    if not isinstance(rate, int) or isinstance(rate, bool) or not MIN_RATE <= rate <= MAX_RATE:
        detail = f"audio/pcm rate must be an integer from {MIN_RATE} to {MAX_RATE} Hz, got {rate!r}"
        raise INVALID_AUDIO_FORMAT.error(detail=detail, param=f"{param}.rate")
    return AudioFormat(Encoding.PCM, rate)


def pcm_ms(num_bytes: int, rate: int) -> float:
    """Duration of PCM16 mono bytes at ``rate``."""
    return num_bytes * 500.0 / rate


# --- G.711 ------------------------------------------------------------------------------

_SEG_AEND = (0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF)
_SEG_UEND = (0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF)


def _segment(value: int, ends: tuple[int, ...]) -> int:
    for index, end in enumerate(ends):
        if value <= end:
            return index
    return len(ends)


def _ulaw_encode_one(pcm: int) -> int:
    pcm >>= 2
    mask = 0xFF
    if pcm < 0:
        pcm, mask = -pcm, 0x7F
    pcm = min(pcm, 8159) + (0x84 >> 2)
    seg = _segment(pcm, _SEG_UEND)
    if seg >= 8:
        return 0x7F ^ mask
    return ((seg << 4) | ((pcm >> (seg + 1)) & 0xF)) ^ mask


def _ulaw_decode_one(code: int) -> int:
    code = ~code & 0xFF
    t = (((code & 0x0F) << 3) + 0x84) << ((code & 0x70) >> 4)
    return 0x84 - t if code & 0x80 else t - 0x84


def _alaw_encode_one(pcm: int) -> int:
    pcm >>= 3
    mask = 0xD5
    if pcm < 0:
        pcm, mask = -pcm - 1, 0x55
    seg = _segment(pcm, _SEG_AEND)
    if seg >= 8:
        return 0x7F ^ mask
    value = (seg << 4) | ((pcm >> 1) & 0x0F if seg < 2 else (pcm >> seg) & 0x0F)
    return value ^ mask


def _alaw_decode_one(code: int) -> int:
    code ^= 0x55
    t = (code & 0x0F) << 4
    seg = (code & 0x70) >> 4
    t = t + 8 if seg == 0 else (t + 0x108) << max(seg - 1, 0)
    return t if code & 0x80 else -t


@cache
def _tables(encoding: Encoding) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int16]]:
    """(encode table indexed by uint16 view of a sample, decode table indexed by code)."""
    encode_one, decode_one = (
        (_ulaw_encode_one, _ulaw_decode_one)
        if encoding is Encoding.PCMU
        else (_alaw_encode_one, _alaw_decode_one)
    )
    samples = np.arange(65536, dtype=np.uint16).view(np.int16)
    encode = np.fromiter((encode_one(int(s)) for s in samples), dtype=np.uint8, count=65536)
    decode = np.fromiter((decode_one(c) for c in range(256)), dtype=np.int16, count=256)
    return encode, decode


def g711_encode(pcm: bytes, encoding: Encoding) -> bytes:
    encode, _ = _tables(encoding)
    samples = np.frombuffer(pcm, dtype="<i2").view(np.uint16)
    return encode[samples].tobytes()


def g711_decode(data: bytes, encoding: Encoding) -> bytes:
    _, decode = _tables(encoding)
    return decode[np.frombuffer(data, dtype=np.uint8)].astype("<i2").tobytes()


# --- streams ----------------------------------------------------------------------------


class _Resampler:
    """PCM16 rate conversion that keeps filter state between chunks (identity when rates match)."""

    def __init__(self, in_rate: int, out_rate: int) -> None:
        self.in_rate, self.out_rate = in_rate, out_rate
        self._stream = self._new_stream()

    def _new_stream(self) -> soxr.ResampleStream | None:
        if self.in_rate == self.out_rate:
            return None
        return soxr.ResampleStream(self.in_rate, self.out_rate, 1, dtype="int16", quality="HQ")

    def flush(self) -> bytes:
        """The samples the filter still holds (tens of ms); the next chunk starts a fresh stream."""
        if self._stream is None:
            return b""
        out: npt.NDArray[np.int16] = self._stream.resample_chunk(np.zeros(0, dtype=np.int16), last=True)
        self._stream = self._new_stream()
        return out.astype("<i2", copy=False).tobytes()

    def __call__(self, pcm: bytes) -> bytes:
        if self._stream is None:
            return pcm
        samples = np.frombuffer(pcm, dtype="<i2")
        out: npt.NDArray[np.int16] = self._stream.resample_chunk(samples)
        return out.astype("<i2", copy=False).tobytes()


class InputDecoder:
    """Wire audio of one format -> PCM16 at the model's input rate."""

    def __init__(self, wire: AudioFormat, model_rate: int) -> None:
        self.wire = wire
        self.model_rate = model_rate
        self._resample = _Resampler(wire.rate, model_rate)
        # Per-append constants, worked out once per format rather than once per append.
        self._is_pcm = wire.encoding is Encoding.PCM
        self._estimate_factor = model_rate * 2
        self._estimate_divisor = wire.rate * wire.bytes_per_sample

    def estimate(self, num_bytes: int) -> int:
        """The model PCM bytes that ``num_bytes`` of wire audio decode to (before resampler lag)."""
        return num_bytes * self._estimate_factor // self._estimate_divisor

    def check(self, data: bytes, param: str = "audio") -> None:
        """Refuse bytes that cannot be this format (before any state changes)."""
        if self._is_pcm and len(data) % 2:
            detail = f"audio/pcm is 16-bit: got {len(data)} bytes, an odd count"
            raise INVALID_AUDIO_FORMAT.error(detail=detail, param=param)

    def decode(self, data: bytes) -> bytes:
        self.check(data)
        pcm = data if self._is_pcm else g711_decode(data, self.wire.encoding)
        return self._resample(pcm)

    def flush(self) -> bytes:
        """The end of a turn: PCM the resampler still held back."""
        return self._resample.flush()


class OutputEncoder:
    """PCM16 at the model's output rate -> wire audio of one format."""

    def __init__(self, wire: AudioFormat, model_rate: int) -> None:
        self.wire = wire
        self._resample = _Resampler(model_rate, wire.rate)

    def encode(self, pcm: bytes) -> bytes:
        resampled = self._resample(pcm)
        return self._to_wire(resampled)

    def flush(self) -> bytes:
        """The end of a response: wire audio the resampler still held back."""
        return self._to_wire(self._resample.flush())

    def _to_wire(self, pcm: bytes) -> bytes:
        if self.wire.encoding is Encoding.PCM or not pcm:
            return pcm
        return g711_encode(pcm, self.wire.encoding)
