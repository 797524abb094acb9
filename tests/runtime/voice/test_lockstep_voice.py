"""A lockstep model's frames as a voice stream's outputs (``runtime/voice/lockstep_voice.py``): turns,
the cut turn's mute, and its bound."""

from __future__ import annotations

from typing import Any

from livegen.models.lockstep import LockstepFrame
from livegen.models.voice import OutputKind
from livegen.runtime.voice.lockstep_voice import LockstepStream

AUDIO = b"\x01\x00" * 4


def stream(yield_frames: int = 2, mute_frames: int = 3) -> LockstepStream:
    # frame_outputs reads neither the clock nor the member: the turn logic is the stream's own.
    nobody: Any = None
    return LockstepStream(nobody, nobody, yield_frames, mute_frames)


def kinds(voice: LockstepStream, speaking: list[bool]) -> list[list[OutputKind]]:
    return [[o.kind for o in voice.frame_outputs(LockstepFrame(AUDIO, speaking=s))] for s in speaking]


async def test_a_turn_ends_after_yield_frames_not_speaking() -> None:
    voice = stream(yield_frames=2)
    said = kinds(voice, [False, True, True, False, False, False])
    assert said == [
        [],
        [OutputKind.AUDIO_DELTA],
        [OutputKind.AUDIO_DELTA],
        [OutputKind.AUDIO_DELTA],
        [OutputKind.AUDIO_DELTA, OutputKind.RESPONSE_DONE],
        [],
    ]


async def test_a_cut_turn_is_muted_until_the_model_stops() -> None:
    voice = stream(mute_frames=10)
    kinds(voice, [True, True])
    await voice.cancel(1)
    assert kinds(voice, [True, True]) == [[], []]  # the rest of the cut turn is dropped
    assert kinds(voice, [False, True]) == [[], [OutputKind.AUDIO_DELTA]]  # a pause, then a new turn
    assert all(o.epoch == 1 for o in voice.frame_outputs(LockstepFrame(AUDIO, speaking=True)))


async def test_a_model_that_never_pauses_is_heard_again_after_the_bound() -> None:
    voice = stream(mute_frames=3)
    kinds(voice, [True])
    await voice.cancel(1)
    assert kinds(voice, [True, True, True, True]) == [[], [], [], [OutputKind.AUDIO_DELTA]]


async def test_a_cancel_outside_a_turn_mutes_nothing() -> None:
    voice = stream()
    await voice.cancel(1)
    assert kinds(voice, [True]) == [[OutputKind.AUDIO_DELTA]]
