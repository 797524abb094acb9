"""The device check's stages that are not a ``livegen`` command: the machine, the sizes that fit, a
random Moshi checkpoint to serve, and causal Wan at the 1.3B geometry (``check.sh`` runs each).

Everything measured goes through livegen's own code and benches: ``checkpoint`` writes what
``models/moshi/weights.py`` loads (config.json, safetensors, SHA256SUMS, livegen.json) from
``models/moshi/loader.py``'s configurations; ``wan`` builds ``CausalWan`` on the stock diffusers
classes with random weights and times it with ``bench/world_model.py``'s ``speed`` and ``_ticks``.

    python scripts/device/stages.py machine OUT.json
    python scripts/device/stages.py sizes --want 1,8,16,32,48,64 [--geometry 7b]
    python scripts/device/stages.py checkpoint DIR --geometry 7b --device cuda --max-sessions N
    python scripts/device/stages.py wan OUT.json --geometry 1.3b --device cuda --sessions 1,4
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time  # noqa: TID251 (it measures wall time)
from pathlib import Path
from typing import Any

GIB = 1024**3
#: Moshi 7B in bfloat16: its weights (7.7 B parameters) and one session's temporal KV ring
#: (32 layers x 3000 frames x 4096 x K and V x 2 bytes), with Mimi's and the depth decoder's state.
MOSHI_7B_WEIGHTS_GIB = 14.4
MOSHI_7B_SESSION_GIB = 1.48
#: Room kept for activations, the allocator's slack and the CUDA context.
HEADROOM_GIB = 6.0

#: Causal Wan's transformer and VAE: Wan 2.1 1.3B's (the VAE's defaults are Wan 2.1's), and a tiny
#: one on the same classes for the dry run (``models/causalwan/loader.py``'s shapes).
WAN = {
    "1.3b": {
        "transformer": {"num_attention_heads": 12, "attention_head_dim": 128, "ffn_dim": 8960,
                        "num_layers": 30, "text_dim": 4096, "freq_dim": 256, "in_channels": 16,
                        "out_channels": 16},
        "vae": {},
        "latent": (60, 104), "text": (512, 4096), "channels": 16, "window": (3, 9),
    },
    "tiny": {
        "transformer": {"num_attention_heads": 2, "attention_head_dim": 12, "ffn_dim": 32, "num_layers": 2,
                        "text_dim": 16, "freq_dim": 16, "in_channels": 4, "out_channels": 4,
                        "rope_max_seq_len": 64},
        "vae": {"base_dim": 8, "z_dim": 4, "dim_mult": [1, 1, 1, 1], "num_res_blocks": 1, "attn_scales": [],
                "temperal_downsample": [False, True, True], "latents_mean": [0.0] * 4,
                "latents_std": [1.0] * 4},
        "latent": (8, 8), "text": (16, 16), "channels": 4, "window": (1, 3),
    },
}  # fmt: skip


def _version(module: str) -> str | None:
    try:
        return str(__import__(module).__version__)
    except Exception as exc:  # a missing package is a finding, not a failure of this stage
        return f"missing ({type(exc).__name__})"


def _run(*command: str) -> str | None:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=20, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def machine() -> dict[str, Any]:
    """The machine and the versions the figures were measured on."""
    import torch

    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        **{name: _version(name) for name in ("transformers", "diffusers", "numpy", "uvicorn", "starlette")},
        "livegen_commit": _run("git", "rev-parse", "--short", "HEAD"),
        "nvidia_smi": _run(
            "nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"
        ),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        facts["gpu"] = {"name": props.name, "memory_gib": round(props.total_memory / GIB, 1),
                        "multiprocessors": props.multi_processor_count}  # fmt: skip
    return facts


def sizes_that_fit(want: list[int], memory_gib: float | None) -> list[int]:
    """The batch sizes of ``want`` whose Moshi 7B state pool and weights fit ``memory_gib``."""
    if memory_gib is None:
        return want
    room = memory_gib - MOSHI_7B_WEIGHTS_GIB - HEADROOM_GIB
    fit = [size for size in want if size * MOSHI_7B_SESSION_GIB <= room]
    return fit or want[:1]


def checkpoint(root: Path, geometry: str, device: str, max_sessions: int) -> dict[str, Any]:
    """Random Moshi weights in ``geometry``, saved as ``weights.py`` loads them, with SHA256SUMS."""
    import torch

    from livegen.models.moshi.loader import TINY_SEED, random_model, seven_b_config, tiny_configs

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    start = time.perf_counter()
    config = seven_b_config() if geometry == "7b" else tiny_configs()
    model = random_model(config, TINY_SEED, dtype, device)
    built = time.perf_counter()
    root.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(root)
    del model
    (root / "livegen.json").write_text(json.dumps({"max_sessions": max_sessions}) + "\n")
    names = ["config.json", *sorted(p.name for p in root.glob("*.safetensors"))]
    lines = [f"{_sha256(root / name)}  {name}" for name in names]
    (root / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    size = sum((root / name).stat().st_size for name in names)
    return {"geometry": geometry, "dtype": str(dtype).removeprefix("torch."), "bytes": size,
            "build_s": round(built - start, 1), "save_s": round(time.perf_counter() - built, 1)}  # fmt: skip


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def build_wan(geometry: str, device: str) -> Any:
    """``CausalWan`` on the stock classes with random weights in ``geometry``; a fixed random prompt
    embedding stands in for umT5 (run once per prompt and cached by the model, so not in a chunk)."""
    import torch
    from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanTransformer3DModel

    from livegen.models.causalwan.config import CausalWanConfig
    from livegen.models.causalwan.model import CausalWan
    from livegen.models.causalwan.vae import state_bytes

    shape = WAN[geometry]
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(17)
        transformer = WanTransformer3DModel(**shape["transformer"]).to(dtype).eval()
        vae = AutoencoderKLWan(**shape["vae"]).to(dtype).eval()
        text = torch.randn(1, *shape["text"]).to(dtype)
    height, width = shape["latent"]
    sink, window = shape["window"]
    config = CausalWanConfig(
        latent_height=height, latent_width=width, in_channels=shape["channels"], sink_frames=sink,
        window_frames=window, text_len=shape["text"][0], keys=(),
        decoder_state_bytes=state_bytes(vae, height, width, dtype),
        description=f"causal Wan at the {geometry} geometry, random weights (device check)",
    )  # fmt: skip
    scheduler = FlowMatchEulerDiscreteScheduler(shift=config.shift)
    return CausalWan(f"causal-wan-{geometry}-random", config, transformer, vae, lambda p: text, scheduler)


def wan(geometry: str, device: str, sessions: list[int], chunks: int) -> dict[str, Any]:
    """fps per session for each batch of sessions, and a fresh session's first chunk, alone."""
    from livegen.bench.world_model import _ticks, speed

    start = time.perf_counter()
    model = build_wan(geometry, device)
    model.warm_up()
    report: dict[str, Any] = {"geometry": geometry, "device": str(model.device),
                              "dtype": str(model.dtype).removeprefix("torch."),
                              "build_s": round(time.perf_counter() - start, 1), "fps": model.spec.fps,
                              "frames_per_chunk": model.spec.frames_per_chunk}  # fmt: skip
    first = []
    for i in range(3):
        begun = time.perf_counter()
        model.step(_ticks(f"first{i}", 0, [i], "none", "a forest"), None)
        _sync(model)
        first.append(1000 * (time.perf_counter() - begun))
        model.release(f"first{i}-0")
    report["first_chunk_ms"] = round(statistics.median(first), 1)
    report["sessions"] = []
    for count in sessions:
        row = speed(model, count, chunks, model.spec.frames_per_chunk)
        report["sessions"].append({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()})
        print(f"wan: {count} sessions: {row['fps_per_session']:.2f} fps each", file=sys.stderr)
    return report


def _sync(model: Any) -> None:
    import torch

    if model.device.type == "cuda":
        torch.cuda.synchronize(model.device)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    verbs.add_parser("machine").add_argument("out", type=Path)
    fit = verbs.add_parser("sizes")
    fit.add_argument("--want", default="1,8,16,32,48,64")
    fit.add_argument("--memory-gib", type=float, default=None, help="default: the first GPU's")
    made = verbs.add_parser("checkpoint")
    made.add_argument("root", type=Path)
    made.add_argument("--geometry", choices=["7b", "tiny"], default="7b")
    made.add_argument("--device", default="cuda")
    made.add_argument("--max-sessions", type=int, default=64)
    made.add_argument("--json", type=Path, default=None)
    world = verbs.add_parser("wan")
    world.add_argument("out", type=Path)
    world.add_argument("--geometry", choices=list(WAN), default="1.3b")
    world.add_argument("--device", default="cuda")
    world.add_argument("--sessions", default="1,4")
    world.add_argument("--chunks", type=int, default=10)
    args = parser.parse_args(argv)
    if args.verb == "machine":
        _write(args.out, machine())
    elif args.verb == "sizes":
        memory = args.memory_gib if args.memory_gib is not None else _gpu_memory_gib()
        print(",".join(map(str, sizes_that_fit(_ints(args.want), memory))))
    elif args.verb == "checkpoint":
        made_report = checkpoint(args.root, args.geometry, args.device, args.max_sessions)
        if args.json is not None:
            _write(args.json, made_report)
    else:
        _write(args.out, wan(args.geometry, args.device, _ints(args.sessions), args.chunks))


def _gpu_memory_gib() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    return float(torch.cuda.get_device_properties(0).total_memory / GIB)


def _ints(text: str) -> list[int]:
    return sorted({int(part) for part in text.split(",") if part.strip()})


def _write(path: Path, report: dict[str, Any]) -> None:
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1), file=sys.stderr)


if __name__ == "__main__":
    main()
