"""causal-wan from a local directory: the Wan 2.1 diffusers layout written by save_pretrained from the
tiny configuration, a causal checkpoint over it, sha256 checks, and clear errors. No hub, ever."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from livegen.errors import ConfigError
from livegen.models.causalwan import weights
from livegen.models.world import Tick, TickMeta


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory: pytest.TempPathFactory, model: Any) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    root = tmp_path_factory.mktemp("wan")
    model.transformer.save_pretrained(root / "transformer")
    model.vae.save_pretrained(root / "vae")
    encoder = model.encode_text.__closure__[0].cell_contents  # the tiny umT5 the model encodes with
    encoder.save_pretrained(root / "text_encoder")
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, "a": 3, "cave": 4, "red": 5}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )
    fast.save_pretrained(root / "tokenizer")
    geometry = {"height": 64, "width": 64, "text_len": 16, "sink_frames": 1, "window_frames": 3}
    (root / "livegen.json").write_text(json.dumps(geometry))
    return root


def step(wan: Any, chunks: int = 2) -> list[np.ndarray]:
    out = [
        wan.step([Tick(TickMeta("s", f"r{i}", i, ()), 3, "a red cave", {})], None)[0].frames
        for i in range(chunks)
    ]
    wan.release("s")
    return out


def test_loads_the_diffusers_layout_offline_and_serves(weights_dir: Path) -> None:
    wan = weights.load(str(weights_dir), dtype="float32", device="cpu")
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert (wan.spec.width, wan.spec.height, wan.spec.controls) == (64, 64, ())
    assert [f.shape[0] for f in step(wan)] == [9, 12]
    assert wan.spec.state_bytes_per_session > 0


def test_a_causal_checkpoint_loads_over_the_transformer(weights_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "wan"
    root.symlink_to(weights_dir, target_is_directory=True)
    base = weights.load(str(root), dtype="float32", device="cpu")
    state = {f"model.{k}": v * 1.5 for k, v in base.transformer.state_dict().items()}
    causal = tmp_path / "causal.pt"
    torch.save({"generator_ema": state}, causal)
    own = tmp_path / "own"
    own.mkdir()
    for name in ("transformer", "vae", "text_encoder", "tokenizer", "livegen.json"):
        (own / name).symlink_to(weights_dir / name)
    (own / "causal.pt").symlink_to(causal)
    wan = weights.load(str(own), dtype="float32", device="cpu")
    key = "blocks.0.attn1.to_q.weight"
    torch.testing.assert_close(wan.transformer.state_dict()[key], base.transformer.state_dict()[key] * 1.5)
    assert not all(np.array_equal(a, b) for a, b in zip(step(wan), step(base), strict=True))

    del state["model.proj_out.bias"]
    torch.save(state, causal)
    with pytest.raises(ConfigError, match=r"causal.pt does not fit .*proj_out.bias"):
        weights.load(str(own), dtype="float32", device="cpu")


def test_sha256_manifest_is_checked_and_missing_files_are_named(weights_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "w"
    root.mkdir()
    for name in ("transformer", "vae", "text_encoder", "tokenizer", "livegen.json"):
        (root / name).symlink_to(weights_dir / name)
    config = root / "vae" / "config.json"
    digest = hashlib.sha256(config.read_bytes()).hexdigest()
    (root / "SHA256SUMS").write_text(f"{digest}  vae/config.json\n")
    assert weights.verify(root) == 1
    (root / "SHA256SUMS").write_text(f"{'0' * 64}  vae/config.json\n")
    with pytest.raises(ConfigError, match=r"vae/config\.json does not match its sha256"):
        weights.load(str(root), device="cpu")
    (root / "SHA256SUMS").write_text(f"{digest}  vae/gone.safetensors\n")
    with pytest.raises(ConfigError, match=r"gone\.safetensors is listed .* but missing"):
        weights.load(str(root), device="cpu")
    (root / "SHA256SUMS").unlink()
    (root / "text_encoder").unlink()
    with pytest.raises(ConfigError, match=r"text_encoder/config\.json is missing"):
        weights.load(str(root), device="cpu")
    with pytest.raises(ConfigError, match="needs --world-model-path"):
        weights.load(None)


def test_weight_options_reach_only_models_that_take_them() -> None:
    from livegen.models import default_registry
    from livegen.server.config import ServerConfig

    config = ServerConfig(world_model_path="/w", world_dtype="bfloat16")
    assert config.world_options() == {"path": "/w", "dtype": "bfloat16"}
    assert ServerConfig().world_options() == {}
    with pytest.raises(ConfigError, match="'procedural-world' takes no path option"):
        default_registry().load("procedural-world", {"path": "/w"})


def test_bfloat16_weights_serve_with_float32_modules_kept(weights_dir: Path) -> None:
    """The GPU dtype, run on the CPU: diffusers keeps some modules float32 under a bfloat16 model."""
    wan = weights.load(str(weights_dir), dtype="bfloat16", device="cpu")
    assert wan.dtype == torch.bfloat16 and wan.spec.kv is not None and wan.spec.kv.bytes_per_element == 2
    frames = step(wan)
    assert [f.shape for f in frames] == [(9, 64, 64, 3), (12, 64, 64, 3)]
    assert all(f.std() > 0 for f in frames)
