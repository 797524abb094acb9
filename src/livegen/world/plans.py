"""What a world session's chunk transactions are made of: plans, and the effects they leave.

A ``Plan`` is the immutable snapshot of one chunk (``session.py``'s ``begin_tick``);
the effects (``Output``, ``Rejection``, ``Release``, ``Failure``) are what the
session core hands the runtime to do. ``Prompts`` owns the committed prompt and
the transition going on, from which each plan's prompt is drawn. Sans-IO.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from livegen.errors import InvalidRequest
from livegen.models.world import Frames, PromptBlend, TickMeta
from livegen.world.events import Applied, ControlInput, Event
from livegen.world.reducer import Prepared


class Transition(msgspec.Struct, frozen=True):
    """A prompt transition: event ``event_id``'s prompt blends in over ``chunks`` chunks.

    The chunk that applies the event is step 1 (weight 1/N); step N, chunk
    ``first_chunk_index + chunks - 1``, is the first wholly under the new prompt.
    """

    event_id: int
    from_prompt: str
    first_chunk_index: int
    chunks: int

    def step(self, chunk_index: int) -> int:
        return chunk_index - self.first_chunk_index + 1

    def at(self, chunk_index: int) -> dict[str, object]:
        """What a chunk's header says of the transition it is part of."""
        step = self.step(chunk_index)
        return {
            "event_id": self.event_id,
            "step": step,
            "chunks": self.chunks,
            "weight": step / self.chunks,
            "last_chunk_index": self.first_chunk_index + self.chunks - 1,
        }


class Prompts:
    """The committed prompt and the transition going on: what each next chunk's prompt is."""

    def __init__(self, initial: str) -> None:
        self.initial = initial
        self.prompt = initial
        self.transition: Transition | None = None

    def after(self, applied: Sequence[Event], chunk_index: int) -> tuple[str, Transition | None]:
        """The chunk's prompt, and the transition it is a step of: a new one, or the one going on.

        A new transition starts from the prompt in force before the chunk (where a transition was
        still going on, its target: the blend restarts from there).
        """
        prompt, transition = self.prompt, self.transition
        for event in applied:
            if event.prompt is None:
                continue
            transition = None
            if event.transition_chunks > 1:
                transition = Transition(event.event_id, self.prompt, chunk_index, event.transition_chunks)
            prompt = event.prompt
        if transition is not None and transition.step(chunk_index) > transition.chunks:
            transition = None
        return prompt, transition

    def commit(self, plan: Plan) -> None:
        self.prompt, self.transition = plan.prompt, plan.transition

    def reset(self) -> None:
        self.prompt, self.transition = self.initial, None


class Plan(msgspec.Struct, frozen=True):
    """The immutable snapshot of one chunk transaction."""

    meta: TickMeta
    seed: int
    prompt: str
    controls: Mapping[str, ControlInput]
    prepared: Prepared
    #: The prompt transition this chunk is a step of, if any.
    transition: Transition | None = None
    #: The session's seed image, on chunk 0 only.
    seed_image: Frames | None = None
    #: Every event the chunk applies with its player, in order; ``meta.applied_event_ids`` are the owner's.
    applied: tuple[Applied, ...] = ()

    def control_data(self) -> dict[str, object]:
        """Track -> data, as the model's ``Tick.controls`` takes it."""
        return {track: control.data for track, control in self.controls.items()}

    def prompt_blend(self) -> PromptBlend | None:
        """The ``Tick.prompt_blend`` of this chunk: its step of a transition, as a weight."""
        if self.transition is None:
            return None
        weight = self.transition.step(self.meta.chunk_index) / self.transition.chunks
        return PromptBlend(self.transition.from_prompt, weight)


class Output(msgspec.Struct, frozen=True):
    """Effect: a committed chunk; its output must reach the client."""

    meta: TickMeta
    output: object
    transition: Transition | None = None
    #: Every event the chunk applied with its player (``Plan.applied``), for the chunk's header.
    applied: tuple[Applied, ...] = ()

    def prompt_transition(self) -> dict[str, object] | None:
        """The header's ``prompt_transition``: this chunk's step of a transition, or None."""
        return None if self.transition is None else self.transition.at(self.meta.chunk_index)


class Rejection(msgspec.Struct, frozen=True):
    """Effect: events a reducer refused, dropped from the queue; tell the client."""

    error: InvalidRequest
    event_ids: tuple[int, ...]
    #: Whose events they were: the error goes to that player's client.
    player: int = 1


class Release(msgspec.Struct, frozen=True):
    """Effect: forget the model-side state (KV pages, game state) of this session."""

    reason: str


class Failure(msgspec.Struct, frozen=True):
    """Effect: a chunk failed; the session is ``failed`` until reset."""

    code: str
    message: str


Effect = Output | Rejection | Release | Failure
