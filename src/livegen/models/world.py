"""The world-model contract: a spec, and a batched step over ticks.

A world model knows nothing of sessions, queues or sockets. The runtime hands it
a batch of ticks, one per due session, each naming the chunk to generate and the
control state to generate it under; the model returns one chunk of frames per
tick and echoes the tick's metadata unchanged, so that the session core can
check the chunk belongs to the transaction it opened (promise W3,
docs/architecture.md).

KV state: a model that declares a ``KVGeometry`` gets its attention cache from
the runtime's paged pool (``runtime/``), nano-vllm style: the pool is plain
Python bookkeeping (which pages a session holds, which to evict), the tensors
live in one place, the model, allocated once by ``new_kv_storage``. Each tick
names the pages that hold its context frames (sink frames first, then the
window, oldest first) and the pages to write this chunk's frames into. A model
without KV geometry (``kv is None``) keeps its small per-session state itself.

Either way a model holds per-session state that the runtime must release:
``release(session_id)`` on reset, close, failure and disconnect. A model asked
to continue a session whose state it no longer has raises ``StateEvicted``;
it never silently restarts the world.

Calls are synchronous and may take milliseconds: the runtime runs them in a
worker thread (or a Ray actor), never on the event loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

#: Frames are RGB, uint8, shaped (num_frames, height, width, 3).
Frames = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class ControlTrack:
    """One control input a model understands, e.g. track ``action``."""

    name: str
    #: Versioned schema name clients send, e.g. ``livegen.action.v1``.
    schema: str
    #: JSON Schema of the ``data`` field, shown to clients in ``session.created``.
    json_schema: Mapping[str, Any]
    #: The value in force before any event sets this track.
    default: Any
    #: Whether the value holds until changed (a held key) or applies for one chunk.
    is_sticky: bool = False
    description: str = ""


@dataclass(frozen=True)
class KVGeometry:
    """Size of one KV page (one latent frame) and how many a session keeps."""

    num_layers: int
    num_heads: int
    head_dim: int
    tokens_per_frame: int
    #: Most recent frames kept in attention; older ones are evicted.
    window_frames: int
    #: First frames of a rollout that are never evicted.
    sink_frames: int
    bytes_per_element: int = 4
    #: K/V pairs per layer and token: 1, or more for models with extra caches (classifier-free
    #: guidance keeps two branches, Matrix-Game adds keyboard and mouse caches).
    num_branches: int = 1

    @property
    def page_bytes(self) -> int:
        """Bytes of K and V for one frame across all layers and branches."""
        per_layer = 2 * self.num_heads * self.tokens_per_frame * self.head_dim
        return self.num_branches * self.num_layers * per_layer * self.bytes_per_element


@dataclass(frozen=True)
class WorldSpec:
    """What a world model generates and what it listens to."""

    width: int
    height: int
    fps: float
    frames_per_chunk: int
    controls: tuple[ControlTrack, ...]
    kv: KVGeometry | None = None
    description: str = ""
    #: Output frames of chunk 0 where it differs from later chunks (a causal video VAE makes
    #: 1 + 4(n-1) frames of its first n latent frames, then 4n); None: ``frames_per_chunk``.
    first_chunk_frames: int | None = None
    #: Latent frames (KV pages) per chunk; None: one per output frame, as tiny-world.
    latent_frames_per_chunk: int | None = None
    #: Latent frames of chunk 0 where it differs (an image-conditioned first chunk); None: the same.
    first_chunk_latent_frames: int | None = None
    #: Bytes of per-session model state besides KV pages (a VAE's causal decoder cache, the
    #: prompt's cross-attention K/V), counted with the pages in admission.
    state_bytes_per_session: int = 0
    #: Whether chunk 0 can start from a client's image (``Tick.seed_image``, exactly width x height).
    accepts_seed_image: bool = False
    #: The shortest chunk a session may ask for (``session.update`` ``frames_per_chunk``), for models
    #: that generate frame by frame (``Tick.num_frames``); None: every chunk is ``frames_per_chunk``.
    min_frames_per_chunk: int | None = None
    #: A shared world's players, each as the control tracks it steers (player 1, the session's
    #: owner, first; ``world/players.py``); empty: one player, who steers every track.
    players: tuple[tuple[str, ...], ...] = ()

    def for_session(self, frames_per_chunk: int | None) -> WorldSpec:
        """The spec of a session that asked for ``frames_per_chunk`` frames a chunk (None: the
        model's): the nearest length the model makes, from ``min_frames_per_chunk`` up to its own
        ``frames_per_chunk`` (the server's, which its KV pages and admission are sized for)."""
        if frames_per_chunk is None or self.min_frames_per_chunk is None:
            return self
        length = min(max(frames_per_chunk, self.min_frames_per_chunk), self.frames_per_chunk)
        return self if length == self.frames_per_chunk else dataclasses.replace(self, frames_per_chunk=length)

    def track(self, name: str) -> ControlTrack | None:
        return next((t for t in self.controls if t.name == name), None)

    def frames_in_chunk(self, chunk_index: int) -> int:
        """Output frames of chunk ``chunk_index``."""
        if chunk_index == 0 and self.first_chunk_frames is not None:
            return self.first_chunk_frames
        return self.frames_per_chunk

    def pages_in_chunk(self, chunk_index: int) -> int:
        """KV pages (latent frames) chunk ``chunk_index`` writes."""
        later = self.latent_frames_per_chunk or self.frames_per_chunk
        if chunk_index == 0 and self.first_chunk_latent_frames is not None:
            return self.first_chunk_latent_frames
        return later

    def media_time_ms(self, chunk_index: int) -> float:
        """When chunk ``chunk_index``'s first frame is due on the media clock of its rollout."""
        if chunk_index <= 0:
            return 0.0
        frames = self.frames_in_chunk(0) + (chunk_index - 1) * self.frames_per_chunk
        return frames / self.fps * 1000


@dataclass(frozen=True)
class TickMeta:
    """The identity of one chunk execution; a model echoes it unchanged."""

    session_id: str
    request_id: str
    chunk_index: int
    applied_event_ids: tuple[int, ...]


@dataclass(frozen=True)
class PromptBlend:
    """A prompt transition in progress: ``weight`` of the tick's prompt, ``1 - weight`` of ``from_prompt``.

    Step k of a transition over N chunks has weight k/N (the chunk that applies the prompt is
    step 1, the N-th reaches the new prompt). A model that cannot blend prompts switches at once.
    """

    from_prompt: str
    weight: float


@dataclass(frozen=True)
class Tick:
    """One session's share of a batched step: generate chunk ``meta.chunk_index``."""

    meta: TickMeta
    seed: int
    prompt: str
    #: Reduced control state, track name -> data, after this chunk's events.
    controls: Mapping[str, Any]
    #: Pages holding the context frames' KV (sinks, then window, oldest first).
    context_pages: tuple[int, ...] = ()
    #: Pages to write this chunk's frames' KV into, one per frame.
    write_pages: tuple[int, ...] = ()
    #: Set while a prompt transition is in progress (see ``PromptBlend``).
    prompt_blend: PromptBlend | None = None
    #: The session's first frame, RGB uint8 (height, width, 3) at the spec's size, on chunk 0 only;
    #: given only to models whose spec says ``accepts_seed_image``.
    seed_image: Frames | None = field(default=None, repr=False)
    #: Frames to generate: the session's chunk length (``WorldSpec.for_session``); 0: the spec's.
    #: Only models with ``min_frames_per_chunk`` read it; one step's ticks all have the same.
    num_frames: int = 0


@dataclass(frozen=True)
class Chunk:
    """A model's answer to one tick."""

    meta: TickMeta
    frames: Frames = field(repr=False)


@runtime_checkable
class WorldModel(Protocol):
    """What the world runtime needs of a model."""

    name: str
    spec: WorldSpec

    def new_kv_storage(self, num_pages: int) -> Any:
        """Allocate the pool's tensors for ``num_pages`` pages (models without KV return None)."""
        ...

    def step(self, ticks: Sequence[Tick], kv_storage: Any) -> list[Chunk]:
        """Generate one chunk per tick, in one batch where the model can.

        Raises ``StateEvicted`` for a tick with ``chunk_index > 0`` whose
        session state the model no longer holds; any other exception fails
        the ticks that raise it. A step that raises must leave every
        session's state as it found it (commit per-session state at the end,
        as the embedded models do): the runtime steps the ticks again in
        smaller batches to find the ones that fail, and the others go on.
        """
        ...

    def release(self, session_id: str) -> None:
        """Forget a session's model-side state (reset, close, failure, disconnect)."""
        ...
