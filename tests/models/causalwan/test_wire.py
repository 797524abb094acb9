"""causal-wan-tiny behind /v1/worlds, over the wire: 9 then 12 frames a chunk on the media clock,
keys and mouse applied in the chunk the protocol says (the chunk after the one being acked), a
key pressed and released within one chunk acting as a tap, motion summed over the chunk. The
frames equal the model's own for the controls the protocol promises."""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from livegen.client.world import WorldClient, WorldError
from livegen.models.world import PromptBlend, Tick, TickMeta
from livegen.protocol import world as wire
from livegen.server import ServerConfig
from livegen.server.thread import ServerThread


def keys(down: list[str]) -> dict[str, Any]:
    return {"track": "keys", "schema": "livegen.keys.v1", "data": {"down": down}}


def mouse(dx: float, dy: float) -> dict[str, Any]:
    return {"track": "mouse", "schema": "livegen.mouse.v1", "data": {"dx": dx, "dy": dy}}


@pytest.fixture(scope="module")
def server() -> Any:
    config = ServerConfig(voice_model="none", world_model="causal-wan-tiny", api_key=None)
    with ServerThread(config) as running:
        running.wait_ready()
        yield running


async def test_keys_and_mouse_over_the_wire_land_in_the_protocols_chunk(
    server: ServerThread, model: Any
) -> None:
    client = await WorldClient.connect(server.ws_url, auto_ack=False)
    async with client:
        created = await client.create(
            seed=11, prompt="a cave", pacing="asap", max_chunks_ahead=1, output={"format": "png"}
        )
        assert (created["width"], created["height"], created["frames_per_chunk"]) == (64, 64, 12)
        assert {c["track"]: c["schema"] for c in created["controls"]} == {
            "keys": "livegen.keys.v1",
            "mouse": "livegen.mouse.v1",
            "camera": "livegen.camera.v1",
        }
        first = await client.next_chunk()
        # Chunk 1 is held (no credit) until chunk 0 is acked: these all land in chunk 1.
        await client.event(1, controls=[keys(["KeyW"]), mouse(10, 2)])
        await client.event(2, controls=[keys([]), mouse(6, -2)])
        await client.event(3, controls=[keys(["KeyD"])])
        await client.send({"type": "chunk.ack", "chunk_index": 0})
        second = await client.next_chunk()
        await client.send({"type": "chunk.ack", "chunk_index": 1})
        third = await client.next_chunk()
    assert [c.header.chunk_index for c in (first, second, third)] == [0, 1, 2]
    assert [len(c.frames) for c in (first, second, third)] == [9, 12, 12]
    assert [c.header.media_time_ms for c in (first, second, third)] == [0.0, 9 / 16 * 1000, 21 / 16 * 1000]
    assert second.header.applied_event_ids == [1, 2, 3] and third.header.applied_event_ids == []

    # What the protocol promises the model saw: KeyW tapped and KeyD held in chunk 1, motion summed;
    # in chunk 2 KeyD still held, the tap and the motion gone.
    expected = [
        {"keys": {"down": [], "taps": []}, "mouse": {"dx": 0, "dy": 0, "wheel": 0, "buttons": 0}},
        {
            "keys": {"down": ["KeyD"], "taps": ["KeyW"]},
            "mouse": {"dx": 16, "dy": 0, "wheel": 0, "buttons": 0},
        },
        {"keys": {"down": ["KeyD"], "taps": []}, "mouse": {"dx": 0, "dy": 0, "wheel": 0, "buttons": 0}},
    ]
    for index, (chunk, controls) in enumerate(zip((first, second, third), expected, strict=True)):
        meta = TickMeta("wire-check", f"w{index}", index, ())
        [own] = model.step([Tick(meta, 11, "a cave", controls)], None)
        assert np.abs(np.stack(chunk.frames).astype(int) - own.frames).max() <= 1
    model.release("wire-check")
    # And the controls mattered: chunk 1 without them is another picture.
    model.step([Tick(TickMeta("plain", "p0", 0, ()), 11, "a cave", {})], None)
    [plain] = model.step([Tick(TickMeta("plain", "p1", 1, ()), 11, "a cave", {})], None)
    model.release("plain")
    assert np.abs(plain.frames.astype(int) - np.stack(second.frames)).max() > 8


CAMERA_POSE = {
    "position": [1.5, 0, -2],
    "rotation": [0.9, 0, 0.3, 0],
    "intrinsics": {"fx": 0.6, "fy": 0.8, "cx": 0.5, "cy": 0.5},
}


def camera(data: dict[str, Any]) -> dict[str, Any]:
    return {"track": "camera", "schema": "livegen.camera.v1", "data": data}


async def test_camera_over_the_wire_lands_in_the_protocols_chunk_and_holds(
    server: ServerThread, model: Any
) -> None:
    """A velocity then a pose in one chunk: the pose wins there (last write), and holds after."""
    client = await WorldClient.connect(server.ws_url, auto_ack=False)
    async with client:
        await client.create(
            seed=5, prompt="a road", pacing="asap", max_chunks_ahead=1, output={"format": "png"}
        )
        first = await client.next_chunk()
        await client.event(1, controls=[camera({"velocity": {"vz": 2, "yaw": 30}})])
        await client.event(2, controls=[camera({"pose": CAMERA_POSE})])
        await client.send({"type": "chunk.ack", "chunk_index": 0})
        second = await client.next_chunk()
        await client.event(3, controls=[camera({"velocity": {"vz": 2, "yaw": 30}})])
        await client.send({"type": "chunk.ack", "chunk_index": 1})
        third = await client.next_chunk()
        # Bad camera values are typed errors for this client; the session goes on.
        with pytest.raises(WorldError) as refused:
            await client.event(4, controls=[camera({"velocity": {"vz": 1}, "pose": CAMERA_POSE})])
        assert refused.value.code == "invalid_event" and "at most 1" in refused.value.body.message
        assert refused.value.body.event_id == 4
    assert second.header.applied_event_ids == [1, 2] and third.header.applied_event_ids == [3]
    expected = [{}, {"camera": {"pose": CAMERA_POSE}}, {"camera": {"velocity": {"vz": 2, "yaw": 30}}}]
    for index, (chunk, controls) in enumerate(zip((first, second, third), expected, strict=True)):
        meta = TickMeta("camera-check", f"c{index}", index, ())
        [own] = model.step([Tick(meta, 5, "a road", controls)], None)
        assert np.abs(np.stack(chunk.frames).astype(int) - own.frames).max() <= 1
    model.release("camera-check")
    model.step([Tick(TickMeta("plain", "p0", 0, ()), 5, "a road", {})], None)
    [plain] = model.step([Tick(TickMeta("plain", "p1", 1, ()), 5, "a road", {})], None)
    model.release("plain")
    assert np.abs(plain.frames.astype(int) - np.stack(second.frames)).max() > 8


async def test_a_prompt_transition_blends_over_the_chunks_its_headers_name(
    server: ServerThread, model: Any
) -> None:
    """Chunk k of a transition over N chunks runs under the k/N blend; its header says which step."""
    client = await WorldClient.connect(server.ws_url, auto_ack=False)
    async with client:
        await client.create(
            seed=2, prompt="a desert", pacing="asap", max_chunks_ahead=1, output={"format": "png"}
        )
        chunks = [await client.next_chunk()]
        await client.send(
            {"type": "world.event", "event_id": 1, "prompt": "a glacier", "transition_chunks": 3}
        )
        await client.expect(wire.EventAccepted)
        for index in range(4):
            await client.send({"type": "chunk.ack", "chunk_index": index})
            chunks.append(await client.next_chunk())
        for bad in (
            {"prompt": "x", "transition_chunks": 65},
            {"transition_chunks": 2, "controls": [keys([])]},
        ):
            await client.send({"type": "world.event", "event_id": 9, **bad})
            error = await client.expect(wire.Error)
            assert error.error.code == "invalid_event" and error.error.param == "transition_chunks"
    headers = [c.header for c in chunks]
    assert headers[1].applied_event_ids == [1]
    assert [h.prompt_transition for h in headers] == [
        None,
        *({"event_id": 1, "step": k, "chunks": 3, "weight": k / 3, "last_chunk_index": 3} for k in (1, 2, 3)),
        None,
    ]
    blends = [None, PromptBlend("a desert", 1 / 3), PromptBlend("a desert", 2 / 3), None, None]
    prompts = ["a desert", *["a glacier"] * 4]
    for index, (chunk, prompt, blend) in enumerate(zip(chunks, prompts, blends, strict=True)):
        meta = TickMeta("blend-check", f"b{index}", index, ())
        [own] = model.step([Tick(meta, 2, prompt, {}, prompt_blend=blend)], None)
        assert np.abs(np.stack(chunk.frames).astype(int) - own.frames).max() <= 1
    model.release("blend-check")


def test_a_transition_step_conditions_on_the_blend_of_the_two_prompts_cached_kv(model: Any) -> None:
    """Each layer's cross-attention K and V at step k of N are (1 - k/N) old + k/N new."""
    old, new = model.conditioning(Tick(TickMeta("s", "r", 0, ()), 0, "old", {})), model._text("new")
    assert (
        model.conditioning(
            Tick(TickMeta("s", "r", 0, ()), 0, "new", {}, prompt_blend=PromptBlend("old", 1.0))
        )
        is new
    )
    for k in (1, 2, 3):
        blended = model.conditioning(
            Tick(TickMeta("s", "r", 0, ()), 0, "new", {}, prompt_blend=PromptBlend("old", k / 4))
        )
        for (ok, ov), (nk, nv), (bk, bv) in zip(old, new, blended, strict=True):
            assert torch.allclose(bk, ok + (nk - ok) * k / 4, atol=1e-6)
            assert torch.allclose(bv, ov + (nv - ov) * k / 4, atol=1e-6)
            assert not torch.allclose(bk, nk)


def png(pixels: np.ndarray) -> str:
    buffer = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue()).decode()


SEED_IMAGE = np.random.default_rng(8).integers(0, 256, (64, 64, 3), dtype=np.uint8)


async def test_a_seed_image_starts_the_first_chunk_and_bad_ones_are_typed_errors(
    server: ServerThread, model: Any
) -> None:
    client = await WorldClient.connect(server.ws_url, auto_ack=False)
    async with client:
        for bad, code in ((png(SEED_IMAGE[:32]), "invalid_seed_image"), ("aGVsbG8=", "invalid_seed_image")):
            await client.send({"type": "session.update", "session": {"seed_image": bad}})
            error = await client.expect(wire.Error)
            assert (error.error.code, error.error.param) == (code, "session.seed_image")
        created = await client.create(
            seed=4, prompt="a lake", pacing="asap", max_chunks_ahead=1, output={"format": "png"},
            seed_image=png(SEED_IMAGE),
        )  # fmt: skip
        assert created["seed_image"] is True
        first = await client.next_chunk()
        await client.send({"type": "session.update", "session": {"seed_image": png(SEED_IMAGE)}})
        error = await client.expect(wire.Error)
        assert (error.error.code, error.error.param) == ("invalid_request", "session.seed_image")
    latents: dict[str, torch.Tensor] = {}
    model.on_latents = lambda request_id, x: latents.__setitem__(request_id, x.clone())
    try:
        [own] = model.step(
            [Tick(TickMeta("seeded", "s0", 0, ()), 4, "a lake", {}, seed_image=SEED_IMAGE)], None
        )
        [plain] = model.step([Tick(TickMeta("plain", "p0", 0, ()), 4, "a lake", {})], None)
    finally:
        model.on_latents = None
        model.release("seeded")
        model.release("plain")
    assert np.abs(np.stack(first.frames).astype(int) - own.frames).max() <= 1
    # The image's latent is chunk 0's first latent frame, untouched by denoising; the rest differ.
    assert torch.equal(latents["s0"][:, :1], model.encode_image(SEED_IMAGE))
    assert not torch.allclose(latents["p0"][:, :1], latents["s0"][:, :1])
    assert np.abs(plain.frames.astype(int) - own.frames).max() > 8
