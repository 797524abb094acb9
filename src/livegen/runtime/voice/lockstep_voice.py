"""A lockstep model as a voice model: each session a seat at its frame clock, its frames as outputs.

The voice engine serves a ``LockstepModel`` (``models/lockstep.py``) through
``LockstepVoice``, a ``VoiceModel`` like any other, so a duplex session goes
through the same session core, runner, owner and transports as the cascade.
Its ``LockstepStream`` is the session's seat (``lockstep.Member``) at the
model's one ``FrameClock`` (in a cluster, a ``RemoteMember`` at the cluster's
lockstep service: ``cluster/lockstep.py``):

- input: appends (PCM16 at the model rate: the session core resampled them)
  are cut into frames and queued for the clock; a clear drops what is queued;
  a commit or a configuration changes nothing (the model hears all the time);
- output: each frame becomes the model's own turn taking, in the contract's
  outputs, untagged by response (the session core owns responses; see
  ``voice/duplex.py``): a speaking frame is an ``AUDIO_DELTA`` (then its inner
  text as a ``TEXT_DELTA``); after ``yield_frames`` frames in a row not
  speaking the turn ends (``RESPONSE_DONE``, completed); frames while nobody
  speaks are not sent.
- a cancel (barge-in, ``response.cancel``) moves the stream to the new epoch
  and mutes the model until it stops speaking: what it still says of the cut
  turn is never a new response. The mute is bounded (``MUTE_LIMIT_MS``): a
  real duplex model falls quiet when talked over, but one that never pauses
  (a random tiny configuration did not in 90 s) would otherwise be silent for
  the rest of the session; past the bound, what it says is a new turn.

A frame the model failed for this session ends this session only: an
``ERROR`` output, then the end of the outputs.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import AsyncIterator

from livegen.models.lockstep import LockstepFrame
from livegen.models.voice import ModelHealth, OutputKind, ResponseRequest, StreamConfig, VoiceOutput
from livegen.runtime.voice.lockstep import Clock, ClockedModel, Place

#: The longest a cut model stays muted while it goes on speaking (see the module's docstring).
MUTE_LIMIT_MS = 2000


class LockstepVoice:
    """A ``VoiceModel`` over a lockstep model and its frame clock."""

    has_vad = False  # the session core detects the user's speech (``voice/vad.py``)

    def __init__(self, name: str, model: ClockedModel, clock: Clock, yield_frames: int) -> None:
        self.name = name
        self.model = model
        self.clock = clock
        self.input_rate = self.output_rate = model.spec.sample_rate
        self.frame_ms = model.spec.frame_ms
        self.yield_frames = max(1, yield_frames)

    async def open(self, session_id: str, config: StreamConfig) -> LockstepStream:
        member = await self.clock.join(session_id, seed=zlib.crc32(session_id.encode()))
        mute_frames = max(1, math.ceil(MUTE_LIMIT_MS / self.frame_ms))
        return LockstepStream(self.clock, member, self.yield_frames, mute_frames)

    def health(self) -> ModelHealth:
        health = self.model.health()
        clock = self.clock
        detail = {
            **health.detail,
            "duplex_sessions": len(clock.members),
            "duplex_step_ms": None if clock.step_cost_s is None else round(1000 * clock.step_cost_s, 2),
            "duplex_frame_ms": self.frame_ms,
            "duplex_missed_frames": clock.missed_frames,
        }
        return ModelHealth(health.ready, health.reason, detail)

    async def close(self) -> None:
        await self.clock.stop()


class LockstepStream:
    """One session's ``VoiceStream`` on the clock: appends in, the model's turns out."""

    def __init__(self, clock: Clock, member: Place, yield_frames: int, mute_frames: int) -> None:
        self.clock = clock
        self.member = member
        self.yield_frames = yield_frames
        self.mute_frames = mute_frames
        self.epoch = 0
        self._in_turn = False
        self._quiet = 0
        self._muted = 0  # speaking frames still to drop of a cut turn (0: not muted)
        self._closed = False

    async def append(self, epoch: int, pcm: bytes) -> None:
        await self.member.put(pcm)

    async def commit(self, epoch: int, item_id: str) -> None:
        return None  # the model heard the turn frame by frame already

    async def clear(self, epoch: int) -> None:
        self.member.clear()

    async def respond(self, epoch: int, request: ResponseRequest) -> None:
        # The session core refuses response.create for a duplex model; this is never reached.
        raise NotImplementedError("a lockstep model answers when it chooses; it takes no requests")

    async def cancel(self, epoch: int) -> None:
        self.epoch = epoch
        if self._in_turn:  # cut: what it still says of this turn is dropped until it stops
            self._muted = self.mute_frames
        self._in_turn = False
        self._quiet = 0

    async def update(self, config: StreamConfig) -> None:
        return None  # what the model cannot honour the session core refused (voice/duplex.py)

    async def outputs(self) -> AsyncIterator[VoiceOutput]:
        while not self._closed:
            result = await self.member.outputs.get()
            if not isinstance(result, LockstepFrame):  # its code says whose failure (the cluster's service's)
                yield VoiceOutput(OutputKind.ERROR, self.epoch, text=str(result), code=result.code)
                return
            for output in self.frame_outputs(result):
                yield output

    def frame_outputs(self, frame: LockstepFrame) -> list[VoiceOutput]:
        """What one frame says: its audio and inner text while the model holds the turn, and the
        turn's end after ``yield_frames`` frames not speaking."""
        epoch = self.epoch
        if frame.speaking:
            if self._muted:
                self._muted -= 1
                return []
            self._in_turn, self._quiet = True, 0
        else:
            self._muted = 0
            if not self._in_turn:
                return []
            self._quiet += 1
        outputs = [VoiceOutput(OutputKind.AUDIO_DELTA, epoch, audio=frame.audio)]
        if frame.text:
            outputs.append(VoiceOutput(OutputKind.TEXT_DELTA, epoch, text=frame.text))
        if self._quiet >= self.yield_frames:
            self._in_turn, self._quiet = False, 0
            outputs.append(VoiceOutput(OutputKind.RESPONSE_DONE, epoch, status="completed"))
        return outputs

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self.clock.leave(self.member)  # the seat goes back to the clock that gave it


__all__ = ["LockstepStream", "LockstepVoice"]
