"""Long self-rollouts for training tiny-world: streams the model plays, beside the game's truth.

Self-forcing within a clip only shows the model its own 1-2-step errors;
rollouts drift over dozens of frames. So some training steps draw their
context from persistent streams instead: each stream is a room the model has
been generating frame after frame (its own frames are the context), paired
with the game played under the same actions (the targets). Training on them
teaches the model to steer a drifted frame back to the game's. Streams end
after a random number of frames and restart from a fresh room, so the model
never has to guess a game state its context has lost.

The buffer lives in memory only: a resumed run starts new streams.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import torch

from livegen.models.room import game
from livegen.models.tinyworld.net import Net, to_uint8, to_unit
from livegen.models.tinyworld.vocab import ACTION_INDEX, THEME_INDEX
from livegen.training.tinyworld.data import Clip, sprite_mask, sticky_actions


@dataclass
class _Stream:
    state: game.State
    action: str
    max_age: int
    model_frames: list[npt.NDArray[np.uint8]] = field(default_factory=list)
    true_frames: list[npt.NDArray[np.uint8]] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    themes: list[int] = field(default_factory=list)
    sprites: list[npt.NDArray[np.bool_]] = field(default_factory=list)


class RolloutBuffer:
    def __init__(self, num_streams: int, context: int, seed: int) -> None:
        self.rng = np.random.default_rng([seed, 0xB0FF])
        self.context = context
        self.streams = [self._new() for _ in range(num_streams)]

    def _new(self) -> _Stream:
        theme = str(self.rng.choice(game.THEMES))
        state = game.new_game(int(self.rng.integers(2**31)), theme)
        for action in sticky_actions(self.rng, int(self.rng.integers(0, 32))):
            state = game.step(state, action)
        stream = _Stream(
            state=state, action=str(self.rng.choice(game.ACTIONS)), max_age=int(self.rng.integers(12, 64))
        )
        for i in range(self.context):
            if i > 0:
                stream.state = game.step(stream.state, stream.action)
            self._record(stream, game.render(stream.state), ACTION_INDEX[stream.action] if i else 0)
        stream.model_frames = list(stream.true_frames)
        return stream

    def _record(self, stream: _Stream, true_frame: npt.NDArray[np.uint8], action: int) -> None:
        stream.true_frames.append(true_frame)
        stream.actions.append(action)
        stream.themes.append(THEME_INDEX[stream.state.theme])
        stream.sprites.append(sprite_mask(stream.state))

    def batch(self) -> tuple[Clip, torch.Tensor]:
        """Step every stream's game once; the clip of true frames and the model's context frames."""
        f = self.context
        for stream in self.streams:
            if self.rng.random() > 0.75:
                stream.action = str(self.rng.choice(game.ACTIONS))
            stream.state = game.step(stream.state, stream.action)
            self._record(stream, game.render(stream.state), ACTION_INDEX[stream.action])
        clip = Clip(
            frames=np.stack([np.stack(s.true_frames[-f - 1 :]) for s in self.streams]),
            actions=np.stack([np.array(s.actions[-f - 1 :]) for s in self.streams]),
            themes=np.stack([np.array(s.themes[-f - 1 :]) for s in self.streams]),
            sprites=np.stack([np.stack(s.sprites[-f - 1 :]) for s in self.streams]),
        )
        context = to_unit(torch.from_numpy(np.stack([np.stack(s.model_frames[-f:]) for s in self.streams])))
        return clip, context

    @torch.no_grad()
    def advance(self, net: Net, clip: Clip, context: torch.Tensor, gen: torch.Generator) -> None:
        """The model's own next frame for every stream (one flow step), then retire old streams."""
        b, f = context.shape[:2]
        actions, themes = torch.from_numpy(clip.actions), torch.from_numpy(clip.themes)
        was_training = net.training
        net.eval()
        zeros = torch.zeros(b * f)
        clean_cond = net.cond(zeros, actions[:, :f].flatten(), themes[:, :f].flatten()).view(b, f, -1)
        noisy_cond = net.cond(zeros + 1, actions[:, 1:].flatten(), themes[:, 1:].flatten()).view(b, f, -1)
        clean_prev = torch.cat([context[:, :1], context[:, :-1]], dim=1)
        noise = torch.randn(context.shape, generator=gen)
        pred = net.forward_train(context, clean_prev, clean_cond, noise, context, noisy_cond)
        net.train(was_training)
        frames = to_uint8(pred[:, -1]).numpy()
        for i, stream in enumerate(self.streams):
            stream.model_frames.append(frames[i])
            for history in (
                stream.model_frames,
                stream.true_frames,
                stream.actions,
                stream.themes,
                stream.sprites,
            ):
                del history[: -f - 1]
            stream.max_age -= 1
            if stream.max_age <= 0:
                self.streams[i] = self._new()
