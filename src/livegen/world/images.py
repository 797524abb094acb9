"""Seed images: a client's first frame for a world, checked and decoded once at session creation.

``session.update`` may carry ``seed_image``, a PNG or JPEG in base64, for a
model whose spec ``accepts_seed_image``. It must be exactly the model's frame
size (no resampling here: the client sees the model's ``width`` and
``height`` and chooses how to crop or scale), fit in one client message
(64 KiB, so about 48 KiB of image), and decode. Every refusal is an
``InvalidRequest`` with param ``session.seed_image``: ``seed_image_not_supported``
where the model renders its own first frame, ``invalid_seed_image`` for
anything else. The size is read from the header before any pixel is decoded,
so a small file that claims a huge picture costs nothing.
"""

from __future__ import annotations

import base64
import binascii
import io

import numpy as np

from livegen.errors import InvalidRequest
from livegen.models.world import Frames, WorldSpec

#: Largest decoded image; a message (64 KiB of base64) cannot carry more anyway.
MAX_SEED_IMAGE_BYTES = 48 * 1024
PARAM = "session.seed_image"
_SIGNATURES = {b"\x89PNG\r\n\x1a\n": "PNG", b"\xff\xd8\xff": "JPEG"}


def _invalid(message: str) -> InvalidRequest:
    return InvalidRequest(message, code="invalid_seed_image", param=PARAM)


def decode_seed_image(data: str, spec: WorldSpec, model: str) -> Frames:
    """The (height, width, 3) uint8 RGB frame of a base64 PNG or JPEG; raises ``InvalidRequest``."""
    if not spec.accepts_seed_image:
        raise InvalidRequest(
            f"model {model!r} cannot start from an image (it renders its own first frame); "
            "leave session.seed_image out",
            code="seed_image_not_supported",
            param=PARAM,
        )
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise _invalid("session.seed_image must be a PNG or JPEG in standard base64") from None
    if len(raw) > MAX_SEED_IMAGE_BYTES:
        raise _invalid(f"session.seed_image is {len(raw)} bytes; at most {MAX_SEED_IMAGE_BYTES}")
    kind = next((name for magic, name in _SIGNATURES.items() if raw.startswith(magic)), None)
    if kind is None:
        raise _invalid("session.seed_image is neither PNG nor JPEG")
    return _pixels(raw, kind, spec)


def _pixels(raw: bytes, kind: str, spec: WorldSpec) -> Frames:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(raw), formats=[kind]) as image:
            if image.size != (spec.width, spec.height):
                width, height = image.size
                raise _invalid(
                    f"session.seed_image is {width}x{height}; this model takes {spec.width}x{spec.height} "
                    "(crop or scale it on the client)"
                )
            rgb = np.array(image.convert("RGB"), dtype=np.uint8)  # a copy: writable, as torch wants
    except InvalidRequest:
        raise
    except Exception as exc:  # Pillow raises many types for a broken file; all mean the same here
        raise _invalid(f"session.seed_image is a {kind} that cannot be decoded: {exc}") from None
    return rgb
