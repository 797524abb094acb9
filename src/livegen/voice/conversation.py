"""A voice session's conversation: its items in order, and their wire form.

Items are what the model is given as history, so an assistant item holds only
what the listener heard: truncation (by the client, or by the session on an
interruption) shortens its audio and its transcript together. The item list is
bounded; the oldest items leave first, as a model's context would drop them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from livegen.models.voice import HistoryTurn
from livegen.protocol.errors import (
    INVALID_VALUE,
    ITEM_CREATE_DUPLICATE_ITEM_ID,
    ITEM_DELETE_INVALID_ITEM_ID,
    ITEM_RETRIEVE_INVALID_ITEM_ID,
    PREVIOUS_ITEM_NOT_FOUND,
    WireError,
)

MAX_ITEMS = 512


@dataclass(eq=False)
class Item:
    id: str
    role: str
    #: input_audio, input_text, output_audio or output_text.
    content_type: str
    text: str | None = None
    status: str = "completed"
    #: Assistant audio now in the item (after truncation) and as generated.
    audio_ms: float = 0.0
    generated_audio_ms: float = 0.0

    def to_wire(self) -> dict[str, Any]:
        key = "text" if self.content_type.endswith("text") else "transcript"
        return {
            "id": self.id,
            "object": "realtime.item",
            "type": "message",
            "role": self.role,
            "status": self.status,
            "content": [{"type": self.content_type, key: self.text}],
        }


_CONTENT_TYPES = {
    "user": ("input_text", "input_audio"),
    "system": ("input_text",),
    "assistant": ("output_text", "output_audio", "text"),
}


def item_from_wire(raw: dict[str, Any], item_id: str) -> Item:
    """A client-created item (``conversation.item.create``); messages only."""
    if raw.get("type", "message") != "message":
        detail = f"item type {raw.get('type')!r} is not supported; only 'message' items are"
        raise INVALID_VALUE.error(detail=detail, param="item.type")
    role = raw.get("role")
    if role not in _CONTENT_TYPES:
        detail = f"item.role must be user, assistant or system, got {role!r}"
        raise INVALID_VALUE.error(detail=detail, param="item.role")
    content = raw.get("content")
    if not isinstance(content, list) or len(content) != 1 or not isinstance(content[0], dict):
        raise INVALID_VALUE.error(
            detail="item.content must hold exactly one content part", param="item.content"
        )
    part = content[0]
    content_type = part.get("type")
    if content_type not in _CONTENT_TYPES[role]:
        detail = f"a {role} item cannot hold {content_type!r} content"
        raise INVALID_VALUE.error(detail=detail, param="item.content")
    text = part.get("text", part.get("transcript"))
    if text is not None and not isinstance(text, str):
        raise INVALID_VALUE.error(detail="item text must be a string", param="item.content")
    if content_type == "text":
        content_type = "output_text"
    return Item(id=item_id, role=role, content_type=content_type, text=text)


class Conversation:
    def __init__(self) -> None:
        self._items: dict[str, Item] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._items

    def last_id(self) -> str | None:
        return next(reversed(self._items), None)

    def check_new(self, item_id: str, previous_item_id: str | None) -> None:
        if item_id in self._items:
            raise ITEM_CREATE_DUPLICATE_ITEM_ID.error(item_id=item_id)
        if previous_item_id not in (None, "root") and previous_item_id not in self._items:
            raise PREVIOUS_ITEM_NOT_FOUND.error(item_id=previous_item_id)

    def add(self, item: Item, previous_item_id: str | None = None) -> str | None:
        """Insert after ``previous_item_id`` (or at the end); return the id before it."""
        self.check_new(item.id, previous_item_id)
        if previous_item_id is None or previous_item_id == self.last_id():
            before = self.last_id()
            self._items[item.id] = item
        else:
            ordered = list(self._items.values())
            index = 0 if previous_item_id == "root" else [i.id for i in ordered].index(previous_item_id) + 1
            ordered.insert(index, item)
            self._items = {i.id: i for i in ordered}
            before = None if index == 0 else ordered[index - 1].id
        while len(self._items) > MAX_ITEMS:
            del self._items[next(iter(self._items))]
        return before

    def get(self, item_id: str, missing: WireError = ITEM_RETRIEVE_INVALID_ITEM_ID) -> Item:
        """The item; an unknown id raises ``missing``, the error of the event that named it."""
        try:
            return self._items[item_id]
        except KeyError:
            raise missing.error(item_id=item_id) from None

    def delete(self, item_id: str) -> None:
        self.get(item_id, ITEM_DELETE_INVALID_ITEM_ID)
        del self._items[item_id]

    def history(self) -> list[HistoryTurn]:
        return [HistoryTurn(i.role, i.text or "") for i in self._items.values() if i.text]
