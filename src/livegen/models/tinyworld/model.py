"""``tiny-world``: the trained network behind the world-model contract.

One ``step`` generates a chunk for every tick of the batch together: frame by
frame through the chunk, each denoising step and each KV append is one
forward over all sessions that need it, with context padded to the longest
and masked. The frames' K/V live in KV pages, one page per frame: in the
runtime's pool when it passes ``kv_storage`` (pages named by the tick,
sinks then window), else in a small page list the model keeps per session.
Besides pages, a session's state here is its last frame and theme, which the
next chunk continues from; ``release`` drops it and a later continuation
raises ``StateEvicted``.

Chunk 0 starts from the game's first frame for the tick's seed and prompt
(as world models start from an image), so tiny-world and procedural-world
show the same room for a seed, and the same actions can be compared frame by
frame; or from the client's 32x32 seed image (``Tick.seed_image``), which is
then chunk 0's first frame exactly (the theme still comes from the prompt).
Noise comes from a generator seeded by (seed, chunk index), never from
global state, so a seed, prompt and actions always give the same frames.

The network generates one frame at a time, so a chunk's length is a serving
choice (``frames_per_chunk``, ``livegen serve --world-frames-per-chunk``):
shorter chunks answer input sooner (an input waits for the next chunk
boundary), at more per-chunk work (a tick, an encode, a header, an ack) per
frame. The same seed, prompt, actions and chunk length give the same frames;
another chunk length draws other noise (it is seeded per chunk).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from livegen.errors import ConfigError, ModelContractError, StateEvicted
from livegen.models.room import game
from livegen.models.tinyworld.net import TOKENS_PER_FRAME, Context, Net, to_uint8, to_unit
from livegen.models.tinyworld.sampling import palette_table, sample_frame
from livegen.models.tinyworld.vocab import ACTION_INDEX, THEME_INDEX
from livegen.models.world import Chunk, KVGeometry, Tick, TickMeta, WorldSpec

NAME = "tiny-world"
#: The longest chunk ``--world-frames-per-chunk`` may set (a session may ask for shorter ones).
MAX_FRAMES_PER_CHUNK = 16
SINK_FRAMES = 1
WINDOW_FRAMES = 2
#: Predicted changes smaller than this (in [-1, 1] units) keep the previous pixel: without it,
#: small residual errors accumulate into colour drift over a few dozen frames. For weights
#: without a colour codebook. With one, decoding to the codebook already stops drift, and whether
#: a (smaller) deadband helps depends on the weights, so their manifest says ("deadband"):
#: the 8,038-step weights followed the agent worse with one, the 14,509-step ones better.
DEADBAND = 0.12


@dataclass
class _Session:
    theme: str
    last_frame: Tensor  # (3, 32, 32) in [-1, 1]
    #: Frames' K/V when the runtime passes no pool: (layers, 2, heads, tokens, head_dim) each.
    pages: list[Tensor] = field(default_factory=list)


@dataclass
class _Job:
    """One tick in flight through a chunk."""

    tick: Tick
    session: _Session
    noise: Tensor  # (frames in the chunk, 3, 32, 32)
    #: Per frame of the chunk: taps on the first generated frames, then the held action.
    actions: list[int]
    context: list[Tensor]  # per-frame K/V, sinks then window
    frames: list[np.ndarray] = field(default_factory=list)


class TinyWorld:
    """The tiny-world model (see module docstring); safe for one caller at a time."""

    name = NAME

    def __init__(
        self,
        net: Net,
        *,
        num_steps: int = 2,
        deadband: float = DEADBAND,
        palettes: dict[str, list[list[int]]] | None = None,
        frames_per_chunk: int = game.FRAMES_PER_CHUNK,
    ) -> None:
        if not 1 <= frames_per_chunk <= MAX_FRAMES_PER_CHUNK:
            raise ConfigError(
                f"tiny-world makes 1 to {MAX_FRAMES_PER_CHUNK} frames per chunk, not {frames_per_chunk}"
            )
        self.net = net
        self.num_steps = num_steps
        self.deadband = deadband
        #: Per theme index, the colours of its training frames; generated pixels snap to them.
        self._palettes = palette_table(palettes)
        cfg = net.cfg
        self.kv_geometry = KVGeometry(
            num_layers=cfg.num_layers,
            num_heads=cfg.num_heads,
            head_dim=cfg.head_dim,
            tokens_per_frame=TOKENS_PER_FRAME,
            window_frames=WINDOW_FRAMES,
            sink_frames=SINK_FRAMES,
        )
        room = game.room_spec(
            kv=self.kv_geometry,
            description="A 0.7 M-parameter autoregressive diffusion model trained on the room game; "
            "steer the agent with the arrow keys, name a theme in the prompt.",
            accepts_seed_image=True,
        )
        self.spec: WorldSpec = dataclasses.replace(room, frames_per_chunk=frames_per_chunk)
        self._sessions: dict[str, _Session] = {}
        #: The sha256 of the weights file (``load`` sets it), for recordings to name what made them.
        self.weights_digest: str | None = None

    # -- contract ---------------------------------------------------------

    def new_kv_storage(self, num_pages: int) -> Tensor:
        g = self.kv_geometry
        return torch.zeros(num_pages, g.num_layers, 2, g.num_heads, g.tokens_per_frame, g.head_dim)

    def release(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def step(self, ticks: Sequence[Tick], kv_storage: Any) -> list[Chunk]:
        lengths = {tick.num_frames or self.spec.frames_per_chunk for tick in ticks}
        if len(lengths) > 1:
            raise ModelContractError(f"one step's ticks must share a chunk length, got {sorted(lengths)}")
        frames = lengths.pop()
        jobs = [self._start(tick, kv_storage, frames) for tick in ticks]
        with torch.inference_mode():
            for k in range(frames):
                self._frame(jobs, k, kv_storage)
        chunks = []
        for job in jobs:
            job.session.last_frame = to_unit(torch.from_numpy(job.frames[-1]))
            chunks.append(Chunk(meta=job.tick.meta, frames=np.stack(job.frames)))
        return chunks

    def warm_up(self) -> None:
        """Run a throwaway session through the context lengths a session meets, so that the first
        real session does not pay for the CPU kernels' first-call setup."""
        # Chunk 0 starts with no context; the context is full (sinks and window) once this many
        # more frames are in, however short the chunks.
        to_full = math.ceil((SINK_FRAMES + WINDOW_FRAMES) / self.spec.frames_per_chunk)
        for chunk in range(1 + to_full):
            meta = TickMeta("warm-up", "warm-up", chunk, ())
            self.step([Tick(meta=meta, seed=0, prompt="", controls={})], None)
        self.release("warm-up")

    @property
    def num_sessions(self) -> int:
        return len(self._sessions)

    # -- internals --------------------------------------------------------

    def _start(self, tick: Tick, kv_storage: Any, frames: int) -> _Job:
        meta = tick.meta
        if not 1 <= frames <= MAX_FRAMES_PER_CHUNK:
            raise ModelContractError(f"tick for chunk {meta.chunk_index} asks for {frames} frames")
        if kv_storage is not None and len(tick.write_pages) != frames:
            raise ModelContractError(
                f"tick for chunk {meta.chunk_index} names {len(tick.write_pages)} write pages, needs {frames}"
            )
        actions = _action_indices(tick.controls, frames, meta.chunk_index)
        if meta.chunk_index == 0:
            theme = game.theme_from_prompt(tick.prompt)
            first = (
                tick.seed_image
                if tick.seed_image is not None
                else game.render(game.new_game(tick.seed, theme))
            )
            session = _Session(theme=theme, last_frame=to_unit(torch.from_numpy(first)))
            self._sessions[meta.session_id] = session
        else:
            found = self._sessions.get(meta.session_id)
            if found is None:
                raise StateEvicted(f"no tiny-world state for session {meta.session_id}")
            session = found
            session.theme = game.theme_from_prompt(tick.prompt, session.theme)
        gen = torch.Generator().manual_seed(_noise_seed(tick.seed, meta.chunk_index))
        noise = torch.randn(frames, 3, game.SIZE, game.SIZE, generator=gen)
        if meta.chunk_index == 0:
            context: list[Tensor] = []
            session.pages.clear()
        elif kv_storage is None:
            context = list(session.pages)
        else:
            context = [kv_storage[page] for page in tick.context_pages]
            _trim(context)
        return _Job(tick=tick, session=session, noise=noise, actions=actions, context=context)

    def _frame(self, jobs: list[_Job], k: int, kv_storage: Any) -> None:
        """Frame ``k`` of the chunk for every job: denoise (but chunk 0's first frame), then append K/V."""
        generate = [j for j in jobs if not (k == 0 and j.tick.meta.chunk_index == 0)]
        prev = {
            id(j): j.session.last_frame if not j.frames else to_unit(torch.from_numpy(j.frames[-1]))
            for j in jobs
        }
        ctx = None
        if generate:
            ctx = self._gather([j.context for j in generate])
            images = self._denoise(generate, [prev[id(j)] for j in generate], k, ctx)
            for job, image in zip(generate, images, strict=True):
                job.frames.append(image)
        for job in jobs:
            if len(job.frames) == k:  # chunk 0, frame 0: the game's first frame
                job.frames.append(to_uint8(job.session.last_frame).numpy())
                prev[id(job)] = job.session.last_frame
        current = [to_unit(torch.from_numpy(j.frames[-1])) for j in jobs]
        actions = [
            j.actions[k] if j.frames and not (k == 0 and j.tick.meta.chunk_index == 0) else 0 for j in jobs
        ]
        if len(generate) != len(jobs):
            ctx = self._gather([j.context for j in jobs])
        kv = self._encode(jobs, current, [prev[id(j)] for j in jobs], actions, ctx)
        for job, page_kv in zip(jobs, kv, strict=True):
            self._append(job, k, page_kv, kv_storage)

    def _append(self, job: _Job, k: int, page_kv: Tensor, kv_storage: Any) -> None:
        if kv_storage is not None:
            page = job.tick.write_pages[k]
            kv_storage[page] = page_kv
            job.context.append(kv_storage[page])
        else:
            job.context.append(page_kv)
            job.session.pages.append(page_kv)
            _trim(job.session.pages)
        _trim(job.context)

    def _denoise(
        self, jobs: list[_Job], prevs: list[Tensor], k: int, ctx: Context | None
    ) -> list[np.ndarray]:
        prev = torch.stack(prevs)
        action = torch.tensor([j.actions[k] for j in jobs])
        theme = torch.tensor([THEME_INDEX[j.session.theme] for j in jobs])
        noise = torch.stack([j.noise[k] for j in jobs])
        palette = None if self._palettes is None else self._palettes[theme]
        frames = sample_frame(
            self.net, prev, action, theme, noise, ctx, self.num_steps, self.deadband, palette
        )
        return list(frames.numpy())

    def _encode(
        self,
        jobs: list[_Job],
        frames: list[Tensor],
        prevs: list[Tensor],
        actions: list[int],
        ctx: Context | None,
    ) -> list[Tensor]:
        theme = torch.tensor([THEME_INDEX[j.session.theme] for j in jobs])
        c = self.net.cond(torch.zeros(len(jobs)), torch.tensor(actions), theme)
        _, kv = self.net.run_frame(torch.stack(frames), torch.stack(prevs), c, ctx, decode=False)
        # (layers, 2, B, heads, tokens, hd) -> one page per job
        stacked = torch.stack([torch.stack([k, v]) for k, v in kv])
        return list(stacked.permute(2, 0, 1, 3, 4, 5).contiguous())

    def _gather(self, contexts: list[list[Tensor]]) -> Context | None:
        """Per-layer context K/V for the batch, right-aligned and padded to the longest, and which is real."""
        width = max(len(c) for c in contexts)
        if width == 0:
            return None
        g = self.kv_geometry
        pad = torch.zeros(g.num_layers, 2, g.num_heads, g.tokens_per_frame, g.head_dim)
        rows = [torch.cat([pad[None]] * (width - len(c)) + [p[None] for p in c]) for c in contexts]
        batch = torch.stack(rows)  # (B, width, layers, 2, heads, tokens, hd)
        valid = torch.tensor([[i >= width - len(c) for i in range(width)] for c in contexts])
        per_layer = batch.permute(2, 3, 0, 4, 1, 5, 6).flatten(
            4, 5
        )  # (layers, 2, B, heads, width*tokens, hd)
        return self.net.context([(layer[0], layer[1]) for layer in per_layer], valid)


def _trim(context: list[Tensor]) -> None:
    """Keep the sink frames and the most recent window."""
    while len(context) > SINK_FRAMES + WINDOW_FRAMES:
        del context[SINK_FRAMES]


def _action_indices(controls: Any, num_frames: int, chunk_index: int) -> list[int]:
    """Each frame's action index; chunk 0's first frame is the game's, so its taps start one later."""
    controls = controls if hasattr(controls, "get") else {}
    given = 1 if chunk_index == 0 else 0
    names = ["none"] * given + game.frame_actions(controls, num_frames - given)
    return [ACTION_INDEX.get(name, 0) for name in names]


def _noise_seed(seed: int, chunk_index: int) -> int:
    return int(
        np.random.SeedSequence([seed & 0xFFFFFFFF, seed >> 32 & 0xFFFFFFFF, chunk_index]).generate_state(1)[0]
    )


def load(frames_per_chunk: int | None = None) -> TinyWorld:
    """The registry's loader: the shipped checkpoint, sha256-checked, on one CPU thread;
    ``frames_per_chunk`` (``--world-frames-per-chunk``) when set, else the room game's 4."""
    from livegen.models.tinyworld.weights import load_net

    torch.set_num_threads(1)
    net, manifest = load_net()
    palettes = manifest.get("palettes")
    deadband = manifest.get("deadband", 0.0 if palettes else DEADBAND)
    fpc = game.FRAMES_PER_CHUNK if frames_per_chunk is None else frames_per_chunk
    model = TinyWorld(net, palettes=palettes, deadband=deadband, frames_per_chunk=fpc)
    model.weights_digest = str(manifest["sha256"])
    model.warm_up()
    return model
