"""tiny-world as served: the network's cached path, the world-model contract, the codebook decode.

Training's tests are in ``tests/training/tinyworld/``; the shipped checkpoint's in ``test_shipped.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from livegen.errors import ModelContractError, StateEvicted  # noqa: E402
from livegen.models import Kind, default_registry  # noqa: E402
from livegen.models.room import game  # noqa: E402
from livegen.models.tinyworld.model import TinyWorld  # noqa: E402
from livegen.models.tinyworld.sampling import stack_context  # noqa: E402
from livegen.models.world import WorldModel  # noqa: E402
from models.tinyworld.support import random_net, tick  # noqa: E402


def test_cached_inference_matches_the_training_forward() -> None:
    net = random_net()
    b, f = 2, 3
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(b, f, 3, 32, 32, generator=gen) * 2 - 1
    noise = torch.randn(b, f, 3, 32, 32, generator=gen)
    actions, themes = (
        torch.randint(0, 5, (b, f + 1), generator=gen),
        torch.randint(0, 6, (b, f + 1), generator=gen),
    )
    t = torch.rand(b, f, generator=gen)
    prev = torch.cat([x[:, :1], x[:, :-1]], 1)
    clean_cond = net.cond(torch.zeros(b * f), actions[:, :f].flatten(), themes[:, :f].flatten()).view(
        b, f, -1
    )
    noisy_cond = net.cond(t.flatten(), actions[:, 1:].flatten(), themes[:, 1:].flatten()).view(b, f, -1)
    with torch.no_grad():
        expected = net.forward_train(x, prev, clean_cond, noise, x, noisy_cond)
        cache = []
        for i in range(f):
            _, kv = net.run_frame(
                x[:, i], prev[:, i], clean_cond[:, i], net.context(stack_context(cache)), decode=False
            )
            cache.append(kv)
            got, _ = net.run_frame(
                noise[:, i], x[:, i], noisy_cond[:, i], net.context(stack_context(cache)), decode=True
            )
            assert torch.allclose(got, expected[:, i], atol=1e-5)


def test_tiny_world_implements_the_contract_and_shares_the_room_spec() -> None:
    model = TinyWorld(random_net())
    assert isinstance(model, WorldModel)
    procedural = game.room_spec()
    spec = model.spec
    assert (spec.width, spec.height, spec.fps, spec.frames_per_chunk) == (
        procedural.width,
        procedural.height,
        procedural.fps,
        procedural.frames_per_chunk,
    )
    assert spec.controls == procedural.controls
    assert spec.kv is not None and spec.kv.sink_frames >= 1 and spec.kv.window_frames >= 1
    storage = model.new_kv_storage(3)
    assert storage.shape[0] == 3
    assert storage[0].numel() * storage.element_size() == spec.kv.page_bytes


def test_chunk_zero_starts_from_the_games_first_frame_and_echoes_meta() -> None:
    model = TinyWorld(random_net())
    ticks = [tick("a", 0, seed=5, prompt="lava"), tick("b", 0, seed=9, prompt="into the snow")]
    chunks = model.step(ticks, None)
    assert [c.meta for c in chunks] == [t.meta for t in ticks]
    for chunk, (seed, theme) in zip(chunks, [(5, "lava"), (9, "snow")], strict=True):
        assert chunk.frames.shape == (4, 32, 32, 3) and chunk.frames.dtype == np.uint8
        assert np.array_equal(chunk.frames[0], game.render(game.new_game(seed, theme)))


def play(model: TinyWorld, session: str, actions: list[str], seed: int = 5) -> np.ndarray:
    return np.concatenate(
        [model.step([tick(session, i, seed=seed, action=a)], None)[0].frames for i, a in enumerate(actions)]
    )


def test_same_seed_prompt_and_actions_give_identical_frames() -> None:
    net = random_net()
    actions = ["right", "right", "down", "none"]
    first = play(TinyWorld(net), "a", actions)
    again = play(TinyWorld(net), "b", actions)
    assert np.array_equal(first, again)
    other_seed = play(TinyWorld(net), "c", actions, seed=6)
    assert not np.array_equal(first, other_seed)


def test_a_batch_gives_each_session_what_it_would_get_alone() -> None:
    net = random_net()
    alone = [play(TinyWorld(net), "x", ["left"] * 3, seed=s) for s in (1, 2)]
    model = TinyWorld(net)
    together: list[list[np.ndarray]] = [[], []]
    for chunk in range(3):
        out = model.step(
            [tick("p", chunk, seed=1, action="left"), tick("q", chunk, seed=2, action="left")], None
        )
        for i, c in enumerate(out):
            together[i].append(c.frames)
    for i in range(2):
        assert np.array_equal(np.concatenate(together[i]), alone[i])


def test_kv_pages_from_the_runtime_pool_match_the_models_own_cache() -> None:
    net = random_net()
    own = play(TinyWorld(net), "a", ["up", "up", "left"])
    model = TinyWorld(net)
    storage = model.new_kv_storage(12)
    pages: list[int] = []
    frames = []
    for chunk, action in enumerate(["up", "up", "left"]):
        write = tuple(range(4 * chunk, 4 * chunk + 4))
        context = tuple(pages[:1] + pages[1:][-2:])  # one sink, a window of two
        frames.append(
            model.step([tick("a", chunk, action=action, context=context, write=write)], storage)[0].frames
        )
        pages.extend(write)
    assert np.array_equal(np.concatenate(frames), own)


def test_continuing_without_state_raises_state_evicted() -> None:
    model = TinyWorld(random_net())
    with pytest.raises(StateEvicted):
        model.step([tick("ghost", 1)], None)
    model.step([tick("a", 0)], None)
    model.step([tick("a", 1)], None)
    model.release("a")
    assert model.num_sessions == 0
    with pytest.raises(StateEvicted):
        model.step([tick("a", 2)], None)
    model.release("never-seen")  # releasing twice or unknown sessions is harmless


def test_too_few_write_pages_is_a_contract_error() -> None:
    model = TinyWorld(random_net())
    storage = model.new_kv_storage(4)
    with pytest.raises(ModelContractError):
        model.step([tick("a", 0, write=(0, 1))], storage)


def test_a_new_prompt_theme_changes_the_conditioning() -> None:
    net = random_net()
    model = TinyWorld(net)
    model.step([tick("a", 0, prompt="forest")], None)
    lava = TinyWorld(net)
    lava.step([tick("a", 0, prompt="forest")], None)
    same = model.step([tick("a", 1, prompt="forest")], None)[0].frames
    changed = lava.step([tick("a", 1, prompt="now lava")], None)[0].frames
    assert not np.array_equal(same, changed)


def test_tiny_world_is_registered_and_the_default_world_model() -> None:
    registry = default_registry()
    entry = registry.get("tiny-world")
    assert entry.kind == Kind.WORLD and "torch" in entry.requires
    assert entry.is_available()
    assert registry.resolve(Kind.WORLD, "tiny-world") == entry
    assert registry.default(Kind.WORLD) == entry
    assert registry.resolve(Kind.WORLD, "auto") == entry


def test_bench_world_model_is_listed() -> None:
    from click.testing import CliRunner

    from livegen.cli import main

    result = CliRunner().invoke(main, ["bench", "world-model", "--help"])
    assert result.exit_code == 0 and "--stability-minutes" in result.output


def test_hold_still_keeps_small_changes_out_and_lets_real_ones_through() -> None:
    from livegen.models.tinyworld.sampling import hold_still

    prev = torch.zeros(1, 3, 32, 32)
    x0 = prev.clone()
    x0[..., :4, :4] = 0.05  # residual noise
    x0[..., 10:14, 10:14] = 0.8  # a sprite arriving
    out = hold_still(x0, prev, 0.12)
    assert torch.equal(out[..., :4, :4], prev[..., :4, :4])
    assert torch.equal(out[..., 10:14, 10:14], x0[..., 10:14, 10:14])
    assert torch.equal(hold_still(x0, prev, 0.0), x0)


def test_snap_to_palette_picks_each_pixels_nearest_colour_per_row() -> None:
    from livegen.models.tinyworld.net import to_uint8
    from livegen.models.tinyworld.sampling import palette_tensor, snap_to_palette

    palettes = {"a": [[0, 0, 0], [255, 0, 0]], "b": [[0, 0, 255], [0, 255, 0], [255, 255, 255]]}
    palette = palette_tensor(palettes, ["a", "b"])
    assert palette.shape == (2, 3, 3)
    x0 = torch.full((2, 3, 2, 2), -1.0)  # black everywhere
    x0[:, 0, 0, 0] = 0.6  # reddish pixel
    out = to_uint8(snap_to_palette(x0, palette)).numpy()
    assert out[0, 0, 0].tolist() == [255, 0, 0] and out[0, 1, 1].tolist() == [0, 0, 0]
    # row b has no black: it decodes to one of the colours it is nearest a blend of
    assert out[1, 1, 1].tolist() in ([0, 0, 255], [0, 255, 0])
    assert torch.equal(snap_to_palette(x0, None), x0)


def test_the_model_draws_only_its_themes_colours_when_given_palettes() -> None:
    from livegen.training.tinyworld.data import theme_palettes

    palettes = theme_palettes(num_clips=24)
    plain = TinyWorld(random_net())
    snapped = TinyWorld(random_net(), palettes=palettes)
    ticks = [tick("s", 0), tick("s", 1)]
    frames_plain = np.concatenate([plain.step([t], None)[0].frames for t in ticks])
    frames = np.concatenate([snapped.step([t], None)[0].frames for t in ticks])
    allowed = {tuple(c) for c in palettes["lava"]}
    assert {tuple(c) for c in frames.reshape(-1, 3).tolist()} <= allowed
    assert not {tuple(c) for c in frames_plain.reshape(-1, 3).tolist()} <= allowed  # a random net strays


def test_a_blend_of_two_colours_decodes_to_its_larger_part_not_a_colour_between() -> None:
    from livegen.models.tinyworld.net import to_uint8, to_unit
    from livegen.models.tinyworld.sampling import palette_tensor, snap_to_palette

    red, green, brown = [230, 40, 40], [110, 160, 80], [150, 100, 50]  # forest: agent, floor, crate
    palette = palette_tensor({"t": [green, brown, red]}, ["t"])
    mix = [0.6 * r + 0.4 * g for r, g in zip(red, green, strict=True)]  # mostly red; nearest: brown
    pixels = torch.tensor([[mix, [0.3 * r + 0.7 * g for r, g in zip(red, green, strict=True)], brown]])
    x0 = to_unit(pixels.to(torch.uint8)[:, None])  # (1, 3, 1, 3)
    out = to_uint8(snap_to_palette(x0, palette))[0, 0].tolist()
    assert out == [red, green, brown]


def snap_reference(x0: torch.Tensor, palette: torch.Tensor) -> torch.Tensor:
    """``snap_to_palette`` written out with vectors, as first written: the tests' reference."""
    b, k = palette.shape[:2]
    start = palette[:, :, None, :]  # (B, K, 1, 3)
    span = palette[:, None, :, :] - start  # (B, K, K, 3): segment from colour i to colour j
    pixels = x0.permute(0, 2, 3, 1).reshape(b, -1, 1, 1, 3)  # (B, N, 1, 1, 3)
    along = ((pixels - start[:, None]) * span[:, None]).sum(-1) / (span * span).sum(-1).clamp(min=1e-6)[
        :, None
    ]
    along = along.clamp(0, 1)  # (B, N, K, K): how far from colour i toward colour j
    miss = (pixels - (start[:, None] + along[..., None] * span[:, None])).pow(2).sum(-1)
    pair = miss.flatten(2).argmin(-1)  # (B, N)
    share = along.flatten(2).gather(-1, pair[..., None]).squeeze(-1)
    colour = torch.where(share < 0.5, pair // k, pair % k)
    decoded = palette.gather(1, colour[..., None].expand(-1, -1, 3))  # (B, N, 3)
    return decoded.transpose(1, 2).reshape(x0.shape)


def test_snap_to_palette_decodes_like_its_vector_form_on_many_pixels() -> None:
    """The dot-product form of the codebook decode (faster) picks the same colour per pixel as
    the segment geometry written out with vectors, over 40,000 pixels and uneven palettes."""
    from livegen.models.tinyworld.sampling import palette_tensor, snap_to_palette

    generator = torch.Generator().manual_seed(5)
    colours = torch.randint(0, 256, (2, 9, 3), generator=generator).tolist()
    palette = palette_tensor({"a": colours[0], "b": colours[1][:5]}, ["a", "b"])
    palette = palette.repeat(4, 1, 1)
    x0 = torch.rand(8, 3, 50, 100, generator=generator) * 2.2 - 1.1
    assert torch.equal(snap_to_palette(x0, palette), snap_reference(x0, palette))
