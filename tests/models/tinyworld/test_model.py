"""tiny-world: the network's cached path, the world-model contract, training, and the shipped weights.

Contract tests run a small randomly initialised network (fast, and the
contract does not depend on what the weights learned); the shipped-checkpoint
tests load the real package data.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from livegen.errors import ModelContractError, ModelError, StateEvicted  # noqa: E402
from livegen.models import Kind, default_registry, game  # noqa: E402
from livegen.models.tinyworld.model import TinyWorld  # noqa: E402
from livegen.models.tinyworld.net import Config, Net  # noqa: E402
from livegen.models.tinyworld.sampling import stack_context  # noqa: E402
from livegen.models.tinyworld.train import Hyper, learning_rate, train  # noqa: E402
from livegen.models.tinyworld.weights import export_weights, load_net  # noqa: E402
from livegen.models.world import Tick, TickMeta, WorldModel  # noqa: E402

SMALL = Config(d_model=32, num_layers=2, num_heads=2, stem_channels=16, up_channels=8)


def random_net(cfg: Config = SMALL, seed: int = 0) -> Net:
    """A net whose zero-initialised gates are perturbed, so every path affects the output."""
    torch.manual_seed(seed)
    net = Net(cfg)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return net.eval()


def tick(
    session: str,
    chunk: int,
    *,
    seed: int = 5,
    action: str = "right",
    prompt: str = "a lava room",
    context: tuple[int, ...] = (),
    write: tuple[int, ...] = (),
) -> Tick:
    return Tick(
        meta=TickMeta(session, f"req-{session}-{chunk}", chunk, (chunk,)),
        seed=seed,
        prompt=prompt,
        controls={"action": {"action": action}},
        context_pages=context,
        write_pages=write,
    )


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


def test_training_runs_resumes_and_exports_checked_weights(tmp_path: Path) -> None:
    hp = Hyper(batch=2, context=3)
    out = tmp_path / "run"
    metrics = train(
        out, steps=2, minutes=None, seed=3, resume=False, hp=hp, cfg=SMALL, show_progress=False, probe_every=2
    )
    assert metrics["step"] == 2 and metrics["probes"] and "within_2px" in metrics["probes"][0]
    metrics = train(out, steps=1, minutes=None, seed=3, resume=True, hp=hp, show_progress=False)
    assert metrics["step"] == 3
    assert json.loads((out / "metrics.json").read_text())["step"] == 3
    stretches = [(s["device"], s["first_step"], s["last_step"]) for s in metrics["sessions"]]
    assert stretches == [("cpu", 0, 2), ("cpu", 2, 3)]
    dest = tmp_path / "weights" / "tiny_world.pt"
    export_weights(out / "checkpoint.pt", dest, deadband=0.05)
    net, manifest = load_net(dest.parent)
    assert manifest["step"] == 3 and net.cfg == SMALL and len(manifest["sessions"]) == 2
    assert manifest["deadband"] == 0.05
    assert set(manifest["palettes"]) == set(game.THEMES)
    data = bytearray(dest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    dest.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="sha256"):
        load_net(dest.parent)


def test_training_is_seeded_wherever_its_data_is_drawn(tmp_path: Path) -> None:
    """Run b draws its clips in a worker process, run a in the training process: same run."""
    hp = Hyper(batch=2, context=2)
    runs = [
        train(
            tmp_path / name,
            steps=2,
            minutes=None,
            seed=7,
            resume=False,
            hp=hp,
            cfg=SMALL,
            workers=workers,
            snapshots=workers > 0,
            show_progress=False,
        )
        for name, workers in (("a", 0), ("b", 1))
    ]
    states = [
        torch.load(tmp_path / name / "checkpoint.pt", weights_only=False)["model"] for name in ("a", "b")
    ]
    assert runs[0]["history"] == runs[1]["history"]
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    snapshot = torch.load(tmp_path / "b" / "snapshots" / "ema-2.pt", weights_only=True)
    assert snapshot.keys() == states[1].keys() and all(v.dtype == torch.float16 for v in snapshot.values())
    assert not (tmp_path / "a" / "snapshots").exists()


def test_learning_rate_warms_up_then_anneals_to_lr_end() -> None:
    hp = Hyper(lr=1e-3, warmup=100)
    assert learning_rate(hp, 0, 0.0, None) == pytest.approx(1e-5)
    assert learning_rate(hp, 5000, 0.7, None) == pytest.approx(1e-3)
    assert learning_rate(hp, 5000, 0.0, 1e-4) == pytest.approx(1e-3)
    assert learning_rate(hp, 5000, 0.5, 1e-4) == pytest.approx(5.5e-4)
    assert learning_rate(hp, 5000, 1.0, 1e-4) == pytest.approx(1e-4)


def test_tiny_world_is_registered_and_the_default_world_model() -> None:
    registry = default_registry()
    entry = registry.get("tiny-world")
    assert entry.kind == Kind.WORLD and "torch" in entry.requires
    assert entry.is_available()
    assert registry.resolve(Kind.WORLD, "tiny-world") == entry
    assert registry.default(Kind.WORLD) == entry
    assert registry.resolve(Kind.WORLD, "auto") == entry


def test_train_world_command_writes_checkpoint_and_metrics(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from livegen.cli import main

    out = tmp_path / "cli-run"
    result = CliRunner().invoke(main, ["train-world", "--steps", "1", "--batch", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "checkpoint.pt").exists()
    assert json.loads((out / "metrics.json").read_text())["step"] == 1
    result = CliRunner().invoke(main, ["train-world", "--out", str(out)])
    assert result.exit_code == 2 and "--steps or --minutes" in result.output


def test_bench_world_model_is_listed() -> None:
    from click.testing import CliRunner

    from livegen.cli import main

    result = CliRunner().invoke(main, ["bench", "world-model", "--help"])
    assert result.exit_code == 0 and "--stability-minutes" in result.output


def test_rollout_buffer_pairs_the_models_frames_with_the_games() -> None:
    from livegen.models.tinyworld.buffer import RolloutBuffer
    from livegen.models.tinyworld.net import to_uint8

    net = random_net()
    buffer = RolloutBuffer(num_streams=2, context=3, seed=1)
    clip, context = buffer.batch()
    assert clip.frames.shape == (2, 4, 32, 32, 3) and context.shape == (2, 3, 3, 32, 32)
    # fresh streams start from the game's frames; the newest true frame is the game's current state
    assert np.array_equal(to_uint8(context).numpy(), clip.frames[:, :3])
    for i, stream in enumerate(buffer.streams):
        assert np.array_equal(clip.frames[i, -1], game.render(stream.state))
    buffer.advance(net, clip, context, torch.Generator().manual_seed(0))
    clip2, context2 = buffer.batch()
    # the context now ends with the model's own frame, aligned with the game's frame it stands for
    assert np.array_equal(clip2.frames[:, :3], clip.frames[:, 1:])
    assert torch.equal(context2[:, :2], context[:, 1:])
    assert not np.array_equal(to_uint8(context2[:, 2]).numpy(), clip2.frames[:, 2])


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


def test_theme_palettes_are_the_colours_of_that_themes_frames() -> None:
    from livegen.models.tinyworld.data import theme_palettes

    palettes = theme_palettes(num_clips=24)
    assert set(palettes) <= set(game.THEMES) and len(palettes) >= 4
    for theme, colours in palettes.items():
        frame = game.render(game.new_game(3, theme))
        used = {tuple(c) for c in np.unique(frame.reshape(-1, 3), axis=0).tolist()}
        assert used <= {tuple(c) for c in colours}, theme  # every colour a room of the theme uses
        assert len(colours) <= 10  # and not every colour there is


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
    from livegen.models.tinyworld.data import theme_palettes

    palettes = theme_palettes(num_clips=24)
    plain = TinyWorld(random_net())
    snapped = TinyWorld(random_net(), palettes=palettes)
    ticks = [tick("s", 0), tick("s", 1)]
    frames_plain = np.concatenate([plain.step([t], None)[0].frames for t in ticks])
    frames = np.concatenate([snapped.step([t], None)[0].frames for t in ticks])
    allowed = {tuple(c) for c in palettes["lava"]}
    assert {tuple(c) for c in frames.reshape(-1, 3).tolist()} <= allowed
    assert not {tuple(c) for c in frames_plain.reshape(-1, 3).tolist()} <= allowed  # a random net strays


def test_obstacle_clips_start_with_the_agent_pushing_into_the_bar_or_crate() -> None:
    from livegen.models.tinyworld.data import pushing_spots, sample_clips

    state = game.new_game(3)
    spots = pushing_spots(state)
    assert spots
    for position, action in spots:
        here = game.State(state.theme, position, state.crate, None, state.bar)
        assert game.agent_fits(state, position) and game.step(here, action) == here  # blocked
    clips = sample_clips(np.random.default_rng(0), 16, 4, obstacle_share=1.0)
    first_push_blocked = (clips.frames[:, 1] == clips.frames[:, 0]).all(axis=(1, 2, 3))
    assert clips.actions[:, 1].min() > 0 and first_push_blocked.mean() > 0.8  # a coin or theme may change


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
