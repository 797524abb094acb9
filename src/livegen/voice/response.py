"""One assistant response: its wire object, its item, its paced audio and its one terminal.

The session core (``voice/session.py``) creates a ``Response`` when it sends
``response.created`` and finishes it exactly once, when it sends
``response.done``. In between the response holds the audio the model made but
the client has not been sent yet: audio leaves no faster than real time plus
a lead (``Limits.lead_ms``), so that a barge-in has little to take back.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from livegen.protocol.audio import OutputEncoder
from livegen.protocol.realtime.response import ResponseAudio, ResponseAudioOutput, ResponseObject
from livegen.protocol.realtime.server import as_dict
from livegen.protocol.realtime.session import AudioFormatObject
from livegen.voice.conversation import Item
from livegen.voice.ledger import Playback


@dataclass(frozen=True)
class AudioChunk:
    start_ms: float
    end_ms: float
    #: Base64 of the wire-format audio.
    audio: str
    #: The message item the audio belongs to and its playback (None: the response's current one).
    item: Item | None = None
    playback: Playback | None = None
    #: Not audio: the end of ``item``, which closes once the audio before it is out (an answer
    #: of two items, a spoken preamble then the answer, ``voice/output.py``).
    closes: bool = False


@dataclass(eq=False)
class Response:
    id: str
    epoch: int
    modalities: tuple[str, ...]
    voice: str
    output_format: AudioFormatObject
    #: Each response resamples on its own, so its tail can be flushed at its end.
    encoder: OutputEncoder
    item: Item | None = None
    playback: Playback | None = None
    pending_audio: deque[AudioChunk] = field(default_factory=deque)
    #: The model said RESPONSE_DONE; the response ends once its audio is out.
    model_status: str | None = None
    #: Why the model ended it early (``max_output_tokens``), for ``status_details.reason``.
    model_reason: str = ""
    is_finished: bool = False
    #: ``response.create``'s metadata, echoed on every response object (clients find their reply by it).
    metadata: dict[str, str] | None = None
    #: Every output item in output order: the message (``item``) and the function calls.
    outputs: list[Item] = field(default_factory=list)
    #: Token counts for ``response.done`` (``usage`` on the wire), set when the model ends it.
    usage: dict[str, Any] | None = None
    #: "auto" or "none" (out-of-band: not added to the default conversation).
    conversation: str = "auto"
    max_output_tokens: int | None = None
    #: Words of what the model was given (instructions and history), for a model that reports no usage.
    request_words: int = 0
    #: The phase of the message item being spoken (``commentary``, ``final_answer``; None: neither),
    #: and when the item before it finishes playing (the next one's playback starts then).
    phase: str | None = None
    next_start: float | None = None

    @property
    def is_audio(self) -> bool:
        return "audio" in self.modalities

    @property
    def num_pending_ms(self) -> float:
        if not self.pending_audio:
            return 0.0
        return self.pending_audio[-1].end_ms - self.pending_audio[0].start_ms

    def to_object(self, status: str, details: dict[str, Any] | None = None) -> ResponseObject:
        """The response as the wire carries it, in ``status``."""
        return ResponseObject(
            id=self.id,
            status=status,
            status_details=details,
            output=[item.to_object() for item in self.outputs],
            output_modalities=list(self.modalities),
            conversation_id=None if self.conversation == "none" else "conv_default",
            audio=ResponseAudio(ResponseAudioOutput(self.output_format, self.voice)),
            max_output_tokens="inf" if self.max_output_tokens is None else self.max_output_tokens,
            metadata=self.metadata,
            usage=self.usage,
        )

    def to_wire(self, status: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
        return as_dict(self.to_object(status, details))

    def output_index(self, item: Item) -> int:
        return next(i for i, output in enumerate(self.outputs) if output is item)

    def item_refs(self, item: Item | None = None) -> dict[str, Any]:
        item = item or self.item
        assert item is not None
        return {
            "response_id": self.id,
            "item_id": item.id,
            "output_index": self.output_index(item),
            "content_index": 0,
        }
