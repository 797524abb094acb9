"""A recording's video file: RGB frames in, H.264 in fragmented MP4 (or VP9 in WebM) out, with PyAV.

H.264 (libx264, yuv420p) in MP4 is what every browser and player opens; the
MP4 is fragmented (a fragment per keyframe, an empty ``moov`` first) so a
recording being written, or cut short by a full disk, is still a playable file
up to its last fragment. Where the installed PyAV lacks libx264 the video is
VP9 (else VP8) in WebM. The codec is lossy: a decoded frame is the sent one
within the codec's error (``CRF``; the events log keeps each frame's sha256
for exact checks, ``replay.py``). One encoder thread per recording, so a
recording costs at most one core however many the machine has.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from livegen.errors import ConfigError
from livegen.models.world import Frames

#: Constant rate factor of libx264 / libvpx: 18 is visually lossless for most content.
CRF = 18
#: Keyframe every this many frames: a fragment each, so a cut-short file loses at most this many.
GOP_FRAMES = 32


@dataclasses.dataclass(frozen=True)
class VideoFormat:
    codec: str
    container: str
    suffix: str
    content_type: str


@functools.cache
def best_format() -> VideoFormat:
    """H.264 in MP4 where PyAV can encode it, else VP9 or VP8 in WebM."""
    if importlib.util.find_spec("av") is None:  # PyAV comes with aiortc; the world engine runs without
        raise ConfigError("--world-recordings needs PyAV: pip install 'livegen[webrtc]'")
    import av

    for codec, fmt in (
        ("libx264", VideoFormat("libx264", "mp4", ".mp4", "video/mp4")),
        ("libvpx-vp9", VideoFormat("libvpx-vp9", "webm", ".webm", "video/webm")),
        ("libvpx", VideoFormat("libvpx", "webm", ".webm", "video/webm")),
    ):
        try:
            av.codec.Codec(codec, "w")
        except Exception:  # PyAV raises its own error types per build: try the next
            continue
        return fmt
    raise RuntimeError("this PyAV build encodes neither H.264 nor VP8/VP9")


class VideoWriter:
    """One recording's video; ``write`` and ``close`` run on the recording's writer thread."""

    def __init__(self, path: Path, width: int, height: int, fps: float, fmt: VideoFormat) -> None:
        import av

        options = {"movflags": "frag_keyframe+empty_moov+default_base_moof"} if fmt.container == "mp4" else {}
        self._container: Any = av.open(str(path), mode="w", format=fmt.container, options=options)
        rate = Fraction(fps).limit_denominator(1000)
        stream: Any = self._container.add_stream(fmt.codec, rate=rate)
        # yuv420p needs even sides: odd ones are padded by repeating the last row or column.
        stream.width, stream.height = width + width % 2, height + height % 2
        stream.pix_fmt = "yuv420p"
        stream.codec_context.thread_count = 1
        stream.codec_context.gop_size = GOP_FRAMES
        stream.options = (
            {"crf": str(CRF), "preset": "veryfast"}
            if fmt.codec == "libx264"
            else {"crf": str(CRF), "b": "0", "deadline": "realtime"}
        )
        self._stream = stream
        self.num_frames = 0
        #: Bytes of encoded video handed to the container so far (the file lags: its muxer writes
        #: a fragment at each keyframe); a recording's size counts these (``recording.py``).
        self.encoded_bytes = 0

    def write(self, frames: Frames) -> None:
        import av

        stream = self._stream
        for frame in frames:
            pad = ((0, stream.height - frame.shape[0]), (0, stream.width - frame.shape[1]), (0, 0))
            image = np.pad(frame, pad, mode="edge") if any(p[1] for p in pad) else frame
            video_frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            video_frame.pts = self.num_frames
            for packet in stream.encode(video_frame):
                self.encoded_bytes += packet.size
                self._container.mux(packet)
            self.num_frames += 1

    def close(self) -> None:
        """Flush the encoder and close the file (a failure here leaves what was written)."""
        try:
            for packet in self._stream.encode(None):
                self._container.mux(packet)
        finally:
            self._container.close()


def read_frames(path: Path) -> list[np.ndarray]:
    """Every frame of a recording's video, RGB (for tests and checks)."""
    import av

    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
