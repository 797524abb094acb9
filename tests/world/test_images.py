"""Seed images are checked once, at session creation: the model takes one, PNG or JPEG, base64,
its exact frame size, small enough, decodable; anything else is a typed refusal naming the field."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from livegen.errors import InvalidRequest
from livegen.models.world import WorldSpec
from livegen.world.images import MAX_SEED_IMAGE_BYTES, decode_seed_image

SPEC = WorldSpec(width=8, height=6, fps=16, frames_per_chunk=4, controls=(), accepts_seed_image=True)
PIXELS = np.random.default_rng(3).integers(0, 256, (6, 8, 3), dtype=np.uint8)


def encoded(pixels: np.ndarray, fmt: str, **options: object) -> str:
    buffer = io.BytesIO()
    Image.fromarray(pixels, "RGB" if pixels.ndim == 3 else "L").save(buffer, fmt, **options)
    return base64.b64encode(buffer.getvalue()).decode()


def refusal(data: str, spec: WorldSpec = SPEC) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        decode_seed_image(data, spec, "m")
    assert caught.value.param == "session.seed_image"
    return caught.value


def test_a_png_decodes_to_its_exact_pixels_and_a_jpeg_to_close_ones() -> None:
    assert np.array_equal(decode_seed_image(encoded(PIXELS, "PNG"), SPEC, "m"), PIXELS)
    flat = np.full((6, 8, 3), 120, dtype=np.uint8)
    jpeg = decode_seed_image(encoded(flat, "JPEG", quality=95), SPEC, "m")
    assert jpeg.shape == (6, 8, 3) and jpeg.dtype == np.uint8
    assert np.abs(jpeg.astype(int) - 120).max() <= 3
    grey = decode_seed_image(encoded(PIXELS[..., 0], "PNG"), SPEC, "m")  # any mode becomes RGB
    assert grey.shape == (6, 8, 3)


def test_a_model_that_renders_its_own_first_frame_refuses_any_image() -> None:
    spec = WorldSpec(width=8, height=6, fps=16, frames_per_chunk=4, controls=())
    error = refusal(encoded(PIXELS, "PNG"), spec)
    assert error.code == "seed_image_not_supported" and "'m'" in str(error)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ("not base64!", "base64"),
        (base64.b64encode(b"GIF89a" + bytes(40)).decode(), "neither PNG nor JPEG"),
        (encoded(PIXELS, "PNG")[:60], "cannot be decoded"),  # a truncated PNG
        (base64.b64encode(b"\xff\xd8\xff" + bytes(30)).decode(), "cannot be decoded"),
        (encoded(np.zeros((6, 9, 3), np.uint8), "PNG"), "is 9x6; this model takes 8x6"),
        (base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(MAX_SEED_IMAGE_BYTES)).decode(), "at most"),
    ],
)
def test_bad_images_are_refused_with_invalid_seed_image(data: str, says: str) -> None:
    error = refusal(data)
    assert error.code == "invalid_seed_image" and says in str(error), error


def test_a_huge_picture_in_a_small_file_is_refused_before_decoding() -> None:
    big = np.zeros((4000, 4000, 3), np.uint8)
    data = encoded(big, "PNG", compress_level=9)
    assert len(data) < 64 * 1024
    assert "is 4000x4000" in str(refusal(data))
