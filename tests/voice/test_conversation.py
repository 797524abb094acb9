"""The conversation alone: order, insertion, bounds, and the history the model is given."""

from __future__ import annotations

import pytest

from livegen.errors import RemoteProtocolError
from livegen.voice.conversation import MAX_ITEMS, Conversation, Item


def message(item_id: str, text: str = "hi", role: str = "user") -> Item:
    return Item(id=item_id, role=role, content_type="input_text", text=text)


def test_items_insert_after_the_named_one_and_report_their_predecessor() -> None:
    conversation = Conversation()
    assert conversation.add(message("a")) is None
    assert conversation.add(message("c")) == "a"
    assert conversation.add(message("b"), "a") == "a"
    assert conversation.add(message("z"), "root") is None
    assert [i.id for i in conversation.items()] == ["z", "a", "b", "c"]


def test_unknown_and_duplicate_ids_are_refused() -> None:
    conversation = Conversation()
    conversation.add(message("a"))
    with pytest.raises(RemoteProtocolError):
        conversation.add(message("a"))
    with pytest.raises(RemoteProtocolError):
        conversation.add(message("b"), "missing")
    with pytest.raises(RemoteProtocolError):
        conversation.get("missing")
    assert conversation.find("missing") is None and conversation.find("a") is not None


def test_the_oldest_items_leave_first() -> None:
    conversation = Conversation()
    for n in range(MAX_ITEMS + 3):
        conversation.add(message(f"i{n}"))
    assert len(conversation) == MAX_ITEMS and "i0" not in conversation and f"i{MAX_ITEMS + 2}" in conversation


def test_the_history_holds_messages_with_text_only() -> None:
    conversation = Conversation()
    conversation.add(message("a", "hello"))
    conversation.add(message("b", ""))
    conversation.add(message("c", "there", role="assistant"))
    assert [(t.role, t.text) for t in conversation.history()] == [("user", "hello"), ("assistant", "there")]
