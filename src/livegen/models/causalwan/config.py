"""The serving geometry of a causal Wan model: chunking, attention window, steps, sizes.

The transformer's and VAE's own configurations come with their weights (or
the tiny random ones, ``loader.py``); this is what livegen adds on top, with
Self-Forcing's values as defaults: 3 latent frames per chunk, the four-step
sigmas 1000/750/500/250 shifted by 5, 16 fps. The attention window is
LongLive's (sink 3 plus 9 more frames, 12 of context), since Self-Forcing
itself attends to the whole 21-frame clip and has no rolling window. The
positions a chunk uses (sink + window + chunk, 15) stay within those 21.
"""

from __future__ import annotations

from dataclasses import dataclass

from livegen.models.causalwan.controls import DEFAULT_KEYS


@dataclass(frozen=True)
class CausalWanConfig:
    latent_height: int = 60  # 480 px / 8
    latent_width: int = 104  # 832 px / 8
    in_channels: int = 16
    latent_frames_per_chunk: int = 3
    first_chunk_latent_frames: int = 3
    sink_frames: int = 3
    window_frames: int = 9
    #: Latent frames of the clips the checkpoint was trained on (Self-Forcing's 21): RoPE positions
    #: 0 to this - 1 are the ones it knows. Positions are re-indexed per chunk (``attention.py``), so
    #: sink + window + a chunk must fit in it, whatever the session's length.
    trained_frames: int = 21
    #: Denoising sigmas before the scheduler's shift (the DMD student's 4 steps).
    sigmas: tuple[float, ...] = (1.0, 0.75, 0.5, 0.25)
    shift: float = 5.0
    fps: float = 16.0
    #: Tokens of the prompt's embedding (umT5's 512 for Wan 2.1).
    text_len: int = 512
    #: The VAE's factors: 8x spatial, 4x temporal (1 + 4(n-1) frames for the first n latents).
    spatial_factor: int = 8
    temporal_factor: int = 4
    #: Key vocabulary of the control embedding, where the model has one.
    keys: tuple[str, ...] = DEFAULT_KEYS
    #: One session's VAE decoder cache in bytes (measured at load, ``vae.state_bytes``).
    decoder_state_bytes: int = 0
    description: str = ""

    @property
    def positions_used(self) -> int:
        """RoPE positions a chunk ever uses: its context (sink and window) and its own frames."""
        chunk = max(self.latent_frames_per_chunk, self.first_chunk_latent_frames)
        return self.sink_frames + self.window_frames + chunk

    def tokens_per_frame(self, patch_size: tuple[int, ...]) -> int:
        return (self.latent_height // patch_size[1]) * (self.latent_width // patch_size[2])

    def state_bytes_per_session(
        self, num_layers: int, num_heads: int, head_dim: int, dtype_bytes: int = 4
    ) -> int:
        """Model state besides KV pages: the prompt's cross-attention K/V and the decoder cache."""
        cross = num_layers * 2 * self.text_len * num_heads * head_dim * dtype_bytes
        return cross + self.decoder_state_bytes
