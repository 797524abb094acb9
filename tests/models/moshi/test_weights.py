"""``moshi`` from a local directory: sha256-checked, never downloaded, the same maths as the tiny model."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from livegen.errors import ConfigError
from livegen.models.catalog import CATALOG, default_registry
from livegen.models.lockstep import LockstepModel
from livegen.models.moshi import weights
from livegen.models.moshi.loader import TINY_SEED, random_model, tiny_configs
from livegen.models.registry import Kind, Registry

from .inputs import WINDOW, frames


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("moshi")
    random_model(tiny_configs(WINDOW), TINY_SEED).save_pretrained(root)
    lines = [
        f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}"
        for path in sorted(root.iterdir())
        if path.name == "config.json" or path.suffix == ".safetensors"
    ]
    (root / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    return root


def test_checked_weights_load_and_step_as_the_tiny_model_does(weights_dir: Path, model) -> None:  # type: ignore[no-untyped-def]
    loaded = weights.load(str(weights_dir), device="cpu")
    assert isinstance(loaded, LockstepModel)
    inputs = frames(2, 5)
    a, b = loaded.open_slot("a", 4), model.open_slot("b", 4)
    for frame in inputs:
        mine, tiny = loaded.step([a], [frame])[0], model.step([b], [frame])[0]
        assert mine.audio == tiny.audio
        assert mine.speaking == tiny.speaking
        assert mine.text == ""  # no tokenizer in the directory: no text to read


def test_no_path_no_manifest_or_a_changed_file_is_a_config_error(weights_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--voice-model-path"):
        weights.load(None)
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in weights_dir.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    (copy / "SHA256SUMS").unlink()
    with pytest.raises(ConfigError, match=r"sha256sum config\.json"):
        weights.load(str(copy))
    (copy / "SHA256SUMS").write_bytes((weights_dir / "SHA256SUMS").read_bytes())
    tensors = next(copy.glob("*.safetensors"))
    tensors.write_bytes(tensors.read_bytes()[:-1] + b"\x00")
    with pytest.raises(ConfigError, match="does not match its sha256"):
        weights.load(str(copy))
    (copy / "SHA256SUMS").write_text("0" * 64 + "  config.json\n")
    with pytest.raises(ConfigError, match="does not list"):
        weights.load(str(copy))


def test_the_catalog_serves_moshi_tiny_as_a_lockstep_voice_model() -> None:
    registry = default_registry()
    entry = registry.resolve(registry.get("moshi-tiny").kind, "moshi-tiny")
    assert entry is not None and entry.kind == "voice"
    assert "noise" in entry.description
    assert registry.get("moshi").loader == "livegen.models.moshi.weights:load"
    assert isinstance(registry.load("moshi-tiny"), LockstepModel)


def test_auto_never_falls_back_to_moshi_where_the_cascade_is_not_installed() -> None:
    duplex_only = Registry(entry for entry in CATALOG if entry.name.startswith("moshi"))
    assert all(entry.is_available() for entry in duplex_only.entries(Kind.VOICE))
    assert duplex_only.default(Kind.VOICE) is None
    assert duplex_only.resolve(Kind.VOICE, "moshi-tiny") is not None  # named, it serves


def test_voice_weight_options_reach_the_served_voice_model_only() -> None:
    from livegen.server.config import ServerConfig

    config = ServerConfig(voice_model_path="/w", voice_dtype="bfloat16")
    assert config.voice_options() == {"path": "/w", "dtype": "bfloat16"}
    assert ServerConfig().voice_options() == {}


def test_a_server_serves_moshi_from_the_voice_model_path(weights_dir: Path) -> None:
    """``--voice-model moshi --voice-model-path DIR``: the checked weights reach the loader through
    the server (before, the engine loaded voice models with no options and moshi never served)."""
    import httpx

    from livegen.server.config import ServerConfig
    from livegen.server.thread import ServerThread

    config = ServerConfig(
        api_key=None,
        voice_model="moshi",
        voice_model_path=str(weights_dir),
        voice_device="cpu",
        world_model="none",
    )
    with ServerThread(config) as server:
        server.wait_ready()
        voice = httpx.get(f"{server.http_url}/health", timeout=30).json()["services"]["voice"]
    assert voice["model"] == "moshi" and voice["ready"] and voice["lockstep"]["frame_ms"] == 80.0, voice
