"""Hostile uploads for ``/v1/audio/transcriptions``, shared by the upload fuzz test and whoever attacks it.

Two families (issue 37, items 2 and 6). ``nested_opens``: files that ask FFmpeg
to open other files, by every route a probed FFmpeg takes (``ffconcat`` and HLS
playlists, ``concat:``, ``file:`` and ``subfile`` URLs inside them, an SDP that
dials out), each of which once transcribed a file beside the server or dialled
out. ``upload_cases``: small files with the magic bytes of each accepted format
and the rest mutated (sample rates from 0 Hz to 4 GHz, absurd channel counts,
cut or garbled bodies, playlists behind a format's magic). A server answers
every one 200 or 400 ``invalid_value`` naming ``file``, in bounded time; never
a 500, a traceback, or another file's words. Deterministic for a given
``random.Random``.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from pathlib import Path

#: An empty ID3v2 tag: the start of many mp3 files.
ID3 = b"ID3\x04\x00\x00\x00\x00\x00\x00"
#: The first bytes of each format the route reads.
MAGIC = {
    "wav": b"RIFF\x24\x00\x00\x00WAVE",
    "mp3": b"\xff\xfb\x90\x00",
    "flac": b"fLaC",
    "ogg": b"OggS\x00\x02",
    "webm": b"\x1a\x45\xdf\xa3",
    "mp4": b"\x00\x00\x00\x18ftypM4A ",
    "mpeg": b"\x00\x00\x01\xba",
}


def nested_opens(beside: Path) -> dict[str, bytes]:
    """Uploads that name ``beside`` (a file in the server's working directory), by name and path."""
    relative, absolute = beside.name, str(beside)
    return {
        "ffconcat.wav": f"ffconcat version 1.0\nfile {relative}\n".encode(),
        "ffconcat-absolute.mp3": f"ffconcat version 1.0\nfile '{absolute}'\n".encode(),
        "ffconcat-after-id3.mp3": ID3 + f"ffconcat version 1.0\nfile {relative}\n".encode(),
        "hls.m4a": f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n{relative}\n#EXT-X-ENDLIST\n".encode(),
        "hls-file-url.ogg": f"#EXTM3U\n#EXTINF:10,\nfile:{absolute}\n".encode(),
        "concat-url.webm": f"ffconcat version 1.0\nfile 'concat:{absolute}|{absolute}'\n".encode(),
        "subfile.flac": f"ffconcat version 1.0\nfile 'subfile,,start,0,end,0,,:{absolute}'\n".encode(),
        "sdp.wav": b"v=0\no=- 0 0 IN IP4 127.0.0.1\ns=x\nc=IN IP4 127.0.0.1\nm=audio 9 RTP/AVP 0\n",
    }


def wav(rate: int, channels: int, num_bytes: int, width: int = 2) -> bytes:
    """A PCM WAV whose header says ``rate`` and ``channels`` (any values), with ``num_bytes`` of zeros."""
    fmt = struct.pack(
        "<HHIIHH",
        1,
        channels,
        rate,
        (rate * channels * width) & 0xFFFFFFFF,
        (channels * width) & 0xFFFF,
        8 * width,
    )
    body = b"fmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", num_bytes) + bytes(num_bytes)
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WAVE" + body


def _mutated(rng: random.Random, data: bytes) -> bytes:
    mutable = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        mutable[rng.randrange(len(mutable))] = rng.randrange(256)
    return bytes(mutable)


def upload_cases(rng: random.Random, count: int, beside: Path) -> Iterator[tuple[str, bytes]]:
    """``count`` (name, bytes) uploads, each of a family picked at random."""
    playlists = list(nested_opens(beside).values())
    for index in range(count):
        family = rng.choice(["rate", "channels", "magic", "mutated", "playlist", "cut"])
        if family == "rate":
            data = wav(rng.choice([0, 1, 7_999, 192_001, 2**31, 2**32 - 1, rng.randrange(2**32)]), 1, 3_000)
        elif family == "channels":
            data = wav(16_000, rng.choice([0, 64, 255, 65_535]), 3_000)
        elif family == "magic":
            data = rng.choice(list(MAGIC.values())) + rng.randbytes(rng.randint(0, 4_000))
        elif family == "mutated":
            data = _mutated(rng, wav(rng.choice([8_000, 16_000, 44_100]), 1, rng.randint(2, 8_000)))
        elif family == "playlist":
            data = rng.choice([*MAGIC.values(), ID3]) + rng.choice(playlists)
        else:
            whole = wav(16_000, 1, 8_000)
            data = whole[: rng.randint(0, len(whole))]
        yield f"fuzz{index}.{rng.choice(['wav', 'mp3', 'ogg', 'webm', 'm4a', 'flac'])}", data
