"""Moshi as a ``LockstepModel``: one batched step per 80 ms frame for every live session.

A step, for the rows given: Mimi encodes each session's input frame (``codec.StreamingMimi``); the
temporal transformer of ``MoshiForConditionalGeneration`` runs one position per row over its own
ring KV cache (``cache.RingKV``: per-row positions and a mask, so rows that joined at different
frames share one forward); the stock depth decoder samples the text token's audio codebooks for all
rows together; Mimi decodes the frame the codes complete. The input column is Moshi's own layout
(its streaming ``LMGen``): the text and audio it produced last step, the user's semantic code of
this frame and the user's acoustic codes of the previous frame (acoustic codes run one frame late),
so the model's audio for frame ``n`` is complete one step later: the first step of a session
returns silence, which is Moshi's own 80 ms of latency.

Sampling is Gumbel-max with the noise of each row drawn from that session's own
``torch.Generator`` (seeded in ``open_slot``), top-k and temperature as Moshi's defaults; a
session's tokens therefore depend only on its seed and its input. A row's floating-point sums can
differ in the last bits between batch sizes (kernels block differently), which moves audio by far
less than one PCM16 step and, in practice, never moves a sampled token.

``speaking``: Moshi's inner text is sparse (a word's token, then padding while the word is said),
so a frame is ``speaking`` while a word token (neither the padding nor the end-of-padding id) came
within the last ``hangover_frames`` frames.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from livegen.errors import CapacityExceeded, InvalidRequest
from livegen.models.lockstep import LockstepFrame, LockstepSpec
from livegen.models.moshi.cache import RingKV
from livegen.models.moshi.codec import StreamingMimi
from livegen.models.moshi.compat import cache_keyword, run_layers
from livegen.models.voice import ModelHealth


class FrameSizeError(InvalidRequest):
    """A session's input frame is not ``frame_samples`` PCM16 samples; raised before any state changes,
    so the caller drops (or pads) that session's frame and steps the others again."""

    default_code = "invalid_audio_frame"

    def __init__(self, slot: int, got_bytes: int, want_bytes: int) -> None:
        super().__init__(
            f"slot {slot}: an input frame must be {want_bytes} bytes ({want_bytes // 2} PCM16 samples), "
            f"got {got_bytes}",
            param="audio",
        )
        self.slot = slot
        self.got_bytes = got_bytes


@dataclass(frozen=True)
class Sampling:
    """Moshi's defaults: text at temperature 0.7, top 25; audio at 0.8, top 250."""

    text_temperature: float = 0.7
    text_top_k: int = 25
    audio_temperature: float = 0.8
    audio_top_k: int = 250


@dataclass(frozen=True)
class TextVocab:
    """How text token ids read: the padding ids and a decoder for word tokens."""

    pad_id: int
    end_of_padding_id: int
    decode: Callable[[int], str]


class MoshiLockstep:
    """A loaded Moshi and its pool of ``max_sessions`` slots.

    ``step`` is called from one thread; ``open_slot`` and ``close_slot`` between steps (the frame
    clock's worker serialises them with ``step``): a slot closed during a step would lose its
    generator mid-step.
    """

    def __init__(
        self,
        name: str,
        model: Any,
        vocab: TextVocab,
        *,
        max_sessions: int,
        sampling: Sampling = Sampling(),
        hangover_frames: int = 8,
        description: str = "",
    ) -> None:
        config = model.config
        self.name, self.model, self.vocab, self.sampling = name, model, vocab, sampling
        self.description = description
        self.hangover_frames = hangover_frames
        mimi = model.audio_encoder.config
        frame = int(mimi.sampling_rate / mimi.frame_rate)
        self.spec = LockstepSpec(
            sample_rate=mimi.sampling_rate, frame_samples=frame, max_sessions=max_sessions
        )
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.num_codebooks = config.num_codebooks
        self.text_vocab, self.audio_vocab = config.vocab_size, config.audio_vocab_size
        self.kv = RingKV(
            layers=config.num_hidden_layers,
            slots=max_sessions,
            kv_heads=config.num_key_value_heads,
            head_dim=config.head_dim,
            window=min(config.sliding_window, config.max_position_embeddings),
            chunk=1,
            dtype=self.dtype,
            device=self.device,
        )
        self.codec = StreamingMimi(model.audio_encoder, max_sessions, self.num_codebooks)
        self._keyword = cache_keyword(model.decoder.model.layers[0])
        slots, k = max_sessions, self.num_codebooks
        self._text = torch.full((slots,), self.text_vocab, dtype=torch.long, device=self.device)
        self._audio = torch.full((slots, k), self.audio_vocab, dtype=torch.long, device=self.device)
        self._user_acoustic = torch.full(
            (slots, k - 1), self.audio_vocab, dtype=torch.long, device=self.device
        )
        self._steps = [0] * slots
        self._last_word = [-(10**9)] * slots
        self._sessions: list[str | None] = [None] * slots
        self._generators: list[torch.Generator | None] = [None] * slots
        self._lock = threading.Lock()
        self._silence = bytes(2 * frame)

    # -- the pool ---------------------------------------------------------------------------------
    def open_slot(self, session_id: str, seed: int) -> int:
        with self._lock:
            free = [i for i, owner in enumerate(self._sessions) if owner is None]
            if not free:
                raise CapacityExceeded(
                    f"{self.name} holds {self.spec.max_sessions} sessions (its state pool); try again later",
                    code="realtime_capacity",
                )
            slot = free[0]  # lowest first: live rows stay contiguous, so the KV pool is read in place
            self._sessions[slot] = session_id
        self._reset(slot)
        generator = torch.Generator(device=self.device)
        generator.manual_seed(seed)
        self._generators[slot] = generator
        return slot

    def close_slot(self, slot: int) -> None:
        with self._lock:
            if 0 <= slot < len(self._sessions):
                self._sessions[slot] = None
                self._generators[slot] = None

    def open_slots(self) -> list[int]:
        return [i for i, owner in enumerate(self._sessions) if owner is not None]

    def state_bytes(self) -> int:
        """Bytes of per-session state the pool holds (allocated once; flat however long sessions run)."""
        return self.kv.nbytes() + self.codec.nbytes()

    def health(self) -> ModelHealth:
        return ModelHealth(
            detail={
                "lockstep": {
                    "frame_ms": self.spec.frame_ms,
                    "max_sessions": self.spec.max_sessions,
                    "open_slots": len(self.open_slots()),
                    "device": str(self.device),
                }
            }
        )

    def _reset(self, slot: int) -> None:
        self.kv.reset(slot)
        self.codec.reset(slot)
        self._text[slot] = self.text_vocab
        self._audio[slot] = self.audio_vocab
        self._user_acoustic[slot] = self.audio_vocab
        self._steps[slot] = 0
        self._last_word[slot] = -(10**9)

    # -- the step ---------------------------------------------------------------------------------
    def step(self, slots: Sequence[int], frames: Sequence[bytes]) -> list[LockstepFrame]:
        self._check(slots, frames)
        if not slots:
            return []
        rows = torch.tensor(list(slots), dtype=torch.long, device=self.device)
        with torch.no_grad():  # not inference_mode: the pools it writes are reset outside it
            pcm = np.stack([np.frombuffer(frame, dtype="<i2") for frame in frames]).astype(np.float32)
            audio = torch.from_numpy(pcm / 32768.0).to(self.device)[:, None, :]
            user = self.codec.encode(audio, rows)
            noise = self._noise(slots)
            hidden, text_logits = self._temporal(rows, user)
            text = self._sample(
                text_logits, noise[:, 0], self.sampling.text_temperature, self.sampling.text_top_k
            )
            codes = self._depth(hidden, text, noise[:, 1:])
            # A session's first acoustic codes belong to the frame before it began: Moshi (and the
            # stock generate's delay pattern) feeds the start token there, not what was sampled.
            first = [i for i, slot in enumerate(slots) if self._steps[slot] == 0]
            codes[first, 1:] = self.audio_vocab
            out = self._decode(rows, slots, codes)
            self._text[rows] = text
            self._user_acoustic[rows] = user[:, 1:]
            self._audio[rows] = codes
        return self._frames(slots, text.tolist(), out)

    def _check(self, slots: Sequence[int], frames: Sequence[bytes]) -> None:
        if len(slots) != len(frames):
            raise ValueError(f"step got {len(slots)} slots and {len(frames)} frames")
        if len(set(slots)) != len(slots):
            raise ValueError(f"step got a slot twice: {list(slots)}")
        want = 2 * self.spec.frame_samples
        for slot, frame in zip(slots, frames, strict=True):
            if not (0 <= slot < len(self._sessions)) or self._sessions[slot] is None:
                raise ValueError(f"slot {slot} is not open")
            if len(frame) != want:
                raise FrameSizeError(slot, len(frame), want)

    def _noise(self, slots: Sequence[int]) -> Tensor:
        """(B, 1 + codebooks, vocab) uniform noise, each row from its own session's generator."""
        width = max(self.text_vocab, self.audio_vocab)
        draws = []
        for slot in slots:
            generator = self._generators[slot]
            shape = (1 + self.num_codebooks, width)
            draws.append(torch.rand(shape, generator=generator, device=self.device, dtype=torch.float32))
        return torch.stack(draws)

    def _temporal(self, rows: Tensor, user: Tensor) -> tuple[Tensor, Tensor]:
        model, k = self.model, self.num_codebooks
        user_column = torch.cat([user[:, :1], self._user_acoustic[rows]], dim=1)
        embeds = model.decoder.model.embed_tokens(self._text[rows])
        for i in range(k):
            embeds = embeds + model.embed_tokens[i](self._audio[rows, i])
            embeds = embeds + model.embed_tokens[k + i](user_column[:, i])
        hidden = embeds[:, None, :]
        step = self.kv.begin(rows, 1)
        hidden = run_layers(
            model.decoder.model.layers, hidden, self._keyword, step, attention_mask=step.mask,
            position_ids=step.positions,
        )  # fmt: skip
        hidden = model.decoder.model.norm(hidden)
        return hidden, model.decoder.lm_head(hidden)[:, -1]

    def _depth(self, hidden: Tensor, text: Tensor, noise: Tensor) -> Tensor:
        """The stock depth decoder's maths (``MoshiDepthDecoder.forward``, one codebook a call), its
        layers called directly: the wrapper's per-call bookkeeping cost more than the tiny layers."""
        depth = self.model.depth_decoder
        cache = _FrameCache()
        token, codes = text[:, None], []
        for i in range(self.num_codebooks):
            index = torch.tensor([i], device=self.device)
            embed = depth.text_embed_tokens if i == 0 else depth.embed_tokens[i - 1]
            states = embed(token) + depth.input_projections(hidden, index)
            states = run_layers(depth.layers, states, self._keyword, cache, codebook_idx=index)
            logits = depth.lm_heads(states, index)
            token = self._sample(
                logits[:, -1], noise[:, i], self.sampling.audio_temperature, self.sampling.audio_top_k
            )[:, None]
            codes.append(token)
        return torch.cat(codes, dim=1)

    @staticmethod
    def _sample(logits: Tensor, uniform: Tensor, temperature: float, top_k: int) -> Tensor:
        """Gumbel-max over the top ``top_k`` logits at ``temperature``; ``uniform`` is the row's noise."""
        logits = logits.float()
        vocab = logits.shape[-1]
        if top_k < vocab:
            kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        gumbel = -torch.log(-torch.log(uniform[:, :vocab].clamp(1e-20, 1.0 - 1e-7)))
        return torch.argmax(logits / max(temperature, 1e-5) + gumbel, dim=-1)

    def _decode(self, rows: Tensor, slots: Sequence[int], codes: Tensor) -> dict[int, Tensor]:
        """Decode the frame each row's codes complete (none on a session's first step)."""
        ready = [i for i, slot in enumerate(slots) if self._steps[slot] > 0]
        for slot in slots:
            self._steps[slot] += 1
        if not ready:
            return {}
        index = torch.tensor(ready, dtype=torch.long, device=self.device)
        # The semantic code of the last step with this step's acoustic codes: one whole frame.
        frame = torch.cat([self._audio[rows[index], :1], codes[index, 1:]], dim=1)
        audio = self.codec.decode(frame, rows[index])[:, 0]
        pcm = (audio.float().clamp(-1.0, 1.0) * 32767.0).round().to(torch.int16).cpu()
        return {i: pcm[n] for n, i in enumerate(ready)}

    def _frames(self, slots: Sequence[int], text: list[int], audio: dict[int, Tensor]) -> list[LockstepFrame]:
        out = []
        for i, slot in enumerate(slots):
            token = text[i]
            word = token not in (self.vocab.pad_id, self.vocab.end_of_padding_id)
            if word:
                self._last_word[slot] = self._steps[slot]
            pcm = audio[i].numpy().astype("<i2").tobytes() if i in audio else self._silence
            speaking = self._steps[slot] - self._last_word[slot] < self.hangover_frames
            out.append(
                LockstepFrame(audio=pcm, text=self.vocab.decode(token) if word else "", speaking=speaking)
            )
        return out


class _FrameCache:
    """The depth decoder's K/V within one frame (at most ``num_codebooks`` positions, same for all rows)."""

    def __init__(self) -> None:
        self.kv: dict[int, tuple[Tensor, Tensor]] = {}

    def update(
        self, key: Tensor, value: Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[Tensor, Tensor]:
        if layer_idx in self.kv:
            old_key, old_value = self.kv[layer_idx]
            key, value = torch.cat([old_key, key], dim=2), torch.cat([old_value, value], dim=2)
        self.kv[layer_idx] = (key, value)
        return key, value
