"""The world chunk's frame codec: JPEG (libjpeg-turbo via Pillow), PNG, raw RGB.

Both ends use it: the world runner encodes (in a thread, off the event loop:
Pillow releases the GIL while it compresses, so encoding overlaps the next
model step) and the client decodes, so it lives with the rest of the wire.
"""

from __future__ import annotations

import io

import numpy as np
import numpy.typing as npt
from PIL import Image

#: RGB uint8 frames shaped (num_frames, height, width, 3), as ``models.world.Frames``.
Frames = npt.NDArray[np.uint8]


def encode_frame(frame: np.ndarray, fmt: str, quality: int = 85) -> bytes:
    """One (H, W, 3) uint8 frame as ``jpeg``, ``png`` or ``rgb24`` bytes."""
    if fmt == "rgb24":
        return np.ascontiguousarray(frame, dtype=np.uint8).tobytes()
    buffer = io.BytesIO()
    image = Image.fromarray(np.ascontiguousarray(frame, dtype=np.uint8), "RGB")
    if fmt == "jpeg":
        image.save(buffer, "JPEG", quality=quality)
    elif fmt == "png":
        image.save(buffer, "PNG", compress_level=1)
    else:
        raise ValueError(f"unknown frame format {fmt!r}")
    return buffer.getvalue()


def encode_chunk(frames: Frames, fmt: str, quality: int = 85) -> list[bytes]:
    return [encode_frame(frame, fmt, quality) for frame in frames]


def decode_frame(data: bytes, fmt: str, width: int, height: int) -> np.ndarray:
    """The (H, W, 3) uint8 frame back from its bytes (for clients and tests)."""
    if fmt == "rgb24":
        return np.frombuffer(data, dtype=np.uint8).reshape(height, width, 3).copy()
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"), dtype=np.uint8).copy()
