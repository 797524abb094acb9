"""Building Moshi: the tiny random configuration, the 7B geometry with random weights, or local weights.

``moshi-tiny`` is the same code on a tiny configuration of the stock classes, randomly initialised
from a fixed seed (a 2-layer temporal transformer of width 32, a 1-layer depth decoder, a Mimi of 8
filters and one transformer layer with 64-entry codebooks), keeping what the serving path depends
on: 24 kHz, 1920-sample (80 ms) frames, 8 audio codebooks with Moshi's delays. Its speech is noise
and its text is letters from a fixed 64-token vocabulary.

``seven_b`` is Moshi 7B's geometry (``MoshiConfig``'s defaults: width 4096, 32 layers, 32 heads,
a context of 3000 frames; the depth decoder's 6 layers of 1024; Mimi's defaults) with random
weights, for ``livegen bench voice-duplex --geometry 7b``: the speed of the real model without it.
Real weights load in ``weights.py``.
"""

from __future__ import annotations

import string
from typing import Any

import torch

from livegen.models.moshi.model import MoshiLockstep, TextVocab

TINY_SEED = 25
TINY_VOCAB = 64
#: Moshi's text padding ids: 3 is padding, 0 marks the end of a run of padding (a word follows).
PAD_ID, END_OF_PADDING_ID = 3, 0
DEFAULT_MAX_SESSIONS = 32
TINY_DESCRIPTION = (
    "Moshi architecture (full duplex, 80 ms frames), tiny and randomly initialised: its speech is "
    "noise; try the lockstep path without weights"
)


def tiny_configs(window: int = 64) -> Any:
    """The tiny ``MoshiConfig``: Moshi's shape and framing, a fraction of its size."""
    from transformers import MimiConfig, MoshiConfig

    mimi = MimiConfig(
        hidden_size=32, num_filters=4, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
        intermediate_size=64, codebook_size=TINY_VOCAB, codebook_dim=16,
        vector_quantization_hidden_dimension=16, num_quantizers=8, upsample_groups=32, sliding_window=16,
        max_position_embeddings=256,
    )  # fmt: skip
    depth = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "ffn_dim": 64}
    return MoshiConfig(
        vocab_size=TINY_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64,
        max_position_embeddings=window, sliding_window=window, num_codebooks=8,
        audio_encoder_config=mimi.to_dict(), depth_decoder_config=depth,
    )  # fmt: skip


def seven_b_config() -> Any:
    """Moshi 7B's geometry: ``MoshiConfig`` and ``MimiConfig`` defaults (8 codebooks)."""
    from transformers import MimiConfig, MoshiConfig

    return MoshiConfig(audio_encoder_config=MimiConfig().to_dict(), depth_decoder_config={})


def tiny_vocab() -> TextVocab:
    letters = (string.ascii_lowercase + string.digits + " .,?!'-")[: TINY_VOCAB - 4]

    def decode(token: int) -> str:
        return letters[(token - 4) % len(letters)] if token >= 4 else ""

    return TextVocab(pad_id=PAD_ID, end_of_padding_id=END_OF_PADDING_ID, decode=decode)


def random_model(config: Any, seed: int, dtype: torch.dtype = torch.float32, device: str = "cpu") -> Any:
    """``MoshiForConditionalGeneration`` on ``config`` initialised from ``seed``, the global RNG untouched."""
    from transformers import MoshiForConditionalGeneration

    config._attn_implementation = "sdpa"
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(seed)
        previous = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            model = MoshiForConditionalGeneration(config)
        finally:
            torch.set_default_dtype(previous)
    return model.eval()


def build_tiny(max_sessions: int = DEFAULT_MAX_SESSIONS, window: int = 64) -> MoshiLockstep:
    """``moshi-tiny``; ``window`` (frames of context) small enough for tests to wrap its ring."""
    model = random_model(tiny_configs(window), TINY_SEED)
    return MoshiLockstep(
        "moshi-tiny", model, tiny_vocab(), max_sessions=max_sessions, description=TINY_DESCRIPTION
    )


def build_seven_b(max_sessions: int, dtype: torch.dtype, device: str) -> MoshiLockstep:
    """Random weights in Moshi 7B's geometry, for the bench."""
    model = random_model(seven_b_config(), TINY_SEED, dtype, device)
    return MoshiLockstep(
        "moshi-7b-random", model, tiny_vocab(), max_sessions=max_sessions,
        description="Moshi 7B geometry, random weights (bench only)",
    )  # fmt: skip


def load_tiny(max_sessions: int = DEFAULT_MAX_SESSIONS) -> MoshiLockstep:
    """The registry's loader for ``moshi-tiny``: built from the fixed seed, no weights, on one CPU
    thread (its tensors are too small for more to help; as ``causal-wan-tiny`` does)."""
    torch.set_num_threads(1)
    return build_tiny(max_sessions)
