"""What the client heard of each answer: the playback ledgers, acks, truncation, interruption.

The speaker (``output.py``) makes an answer's audio; this module owns what
became of it at the client. Each answer's ``Playback`` (``ledger.py``) is kept
here, the newest ``MAX_PLAYBACKS``, so that acks and truncations naming an
answer that already ended still find it. History keeps what was heard: a cut
(the client's truncate, a barge-in, an interruption) shortens the item's audio
and its transcript to the words spoken by then, and the function calls of an
answer the user did not let stand are refused.
"""

from __future__ import annotations

from livegen.protocol.errors import INVALID_VALUE, TRUNCATE_BEYOND_AUDIO, UNKNOWN_RESPONSE
from livegen.protocol.realtime import server as ev
from livegen.voice.calls import CallLedger
from livegen.voice.chain import Effect, Send, stamped
from livegen.voice.conversation import Conversation, Item
from livegen.voice.ledger import Playback
from livegen.voice.settings import IdFactory

#: Playback ledgers kept for acks and truncation after their responses end.
MAX_PLAYBACKS = 16
#: A truncate this far past the audio is clamped (clients' playback clocks overshoot a little).
TRUNCATE_SLACK_MS = 250


class Heard:
    """The playback ledgers of recent answers, by item id, and the cuts made to them."""

    def __init__(self, ids: IdFactory, conversation: Conversation, calls: CallLedger) -> None:
        self.ids = ids
        self.conversation = conversation
        self.calls = calls
        self.playbacks: dict[str, Playback] = {}

    def add(self, playback: Playback) -> None:
        """A new answer's ledger; the oldest goes past ``MAX_PLAYBACKS``."""
        self.playbacks[playback.item_id] = playback
        while len(self.playbacks) > MAX_PLAYBACKS:
            del self.playbacks[next(iter(self.playbacks))]

    def is_playing(self, now: float) -> bool:
        """Audio already sent is still playing at the client."""
        return any(p.is_playing(now) for p in self.playbacks.values())

    def ack(self, response_id: str | None, item_id: str | None, played_ms: float) -> None:
        """The client's playback position of an answer, named by its response or item id."""
        playback = None
        if response_id or item_id:
            playback = next(
                (
                    p
                    for p in self.playbacks.values()
                    if response_id in (None, p.response_id) and item_id in (None, p.item_id)
                ),
                None,
            )
        if playback is None:
            raise UNKNOWN_RESPONSE.error()
        if played_ms < 0:
            raise INVALID_VALUE.error(detail="played_ms must be >= 0", param="played_ms")
        playback.ack(played_ms)

    def truncated(self, item_id: str, end_ms: float) -> Send:
        event = ev.ItemTruncated(item_id=item_id, content_index=0, audio_end_ms=round(end_ms))
        return stamped(event, self.ids)

    def truncate_item(self, item: Item, end_ms: float) -> None:
        """Cut ``item`` to ``end_ms`` of audio, and its transcript to the words spoken by then."""
        playback = self.playbacks.get(item.id)
        end_ms = min(end_ms, item.audio_ms)
        if playback is not None:
            playback.committed_ms = end_ms
            if item.text is not None:
                item.text = item.text[: playback.text_length_at(end_ms, len(item.text))]
        elif item.text is not None and item.audio_ms > 0:
            item.text = item.text[: round(len(item.text) * end_ms / item.audio_ms)]
        if end_ms < item.audio_ms:
            item.status = "incomplete"
        item.audio_ms = end_ms

    def check_truncate(self, item: Item, content_index: int, audio_end_ms: int) -> None:
        """Refuse a client's truncation of anything but assistant audio, or past its end."""
        if item.role != "assistant" or item.content_type != "output_audio":
            detail = f"item {item.id!r} has no assistant audio to truncate"
            raise INVALID_VALUE.error(detail=detail, param="item_id")
        if content_index != 0:
            raise INVALID_VALUE.error(detail="content_index must be 0", param="content_index")
        playback = self.playbacks.get(item.id)
        generated = item.generated_audio_ms if playback is None else playback.generated_ms
        if not 0 <= audio_end_ms <= generated + TRUNCATE_SLACK_MS:
            raise TRUNCATE_BEYOND_AUDIO.error(audio_ms=generated, audio_end_ms=audio_end_ms)

    def cut(self, item: Item, audio_end_ms: int, now: float) -> Send:
        """The client stopped playing ``item`` at ``audio_end_ms``: history keeps what was heard."""
        end_ms = min(float(audio_end_ms), item.audio_ms)
        playback = self.playbacks.get(item.id)
        if playback is not None:
            playback.stop(now)  # no later barge-in for this audio
        self.truncate_item(item, end_ms)
        return self.truncated(item.id, end_ms)

    def stop_playing(self, now: float) -> list[Effect]:
        """An interruption: every answer still playing stops where it is heard; history keeps that."""
        effects: list[Effect] = []
        for playback in self.playbacks.values():
            if playback.is_playing(now):
                item = self.conversation.find(playback.item_id)
                heard = playback.stop(now)
                self.abandon_calls(playback.response_id)  # the answer that asked was cut
                if item is not None:
                    self.truncate_item(item, heard)
                    effects.append(self.truncated(item.id, heard))
        return effects

    def abandon_calls(self, response_id: str) -> None:
        """The user did not let the answer that made these calls stand: their outputs are refused."""
        abandoned = set(self.calls.abandon_response(response_id))
        for item in self.conversation.items():
            if item.type == "function_call" and item.call_id in abandoned:
                item.status = "incomplete"
