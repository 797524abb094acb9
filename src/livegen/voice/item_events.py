"""The client's ``conversation.item.*`` events on a voice session: create (a message, a function
call or its output, an MCP approval), retrieve, delete and truncate.

They are the session's handlers (``Session._route`` names them), kept in a module of their own
because they are one concept, the client editing history, and ``session.py`` holds the session's
state and the rest of its table. Each takes the session first, as a method would, and keeps the
session's rule: a refused event changes nothing (promise V7), so checks come before writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from livegen.protocol import realtime as wire
from livegen.protocol.errors import (
    INVALID_VALUE,
    ITEM_DELETE_INVALID_ITEM_ID,
    ITEM_RETRIEVE_INVALID_ITEM_ID,
    ITEM_TRUNCATE_INVALID_ITEM_ID,
)
from livegen.protocol.realtime import server as ev
from livegen.voice import duplex, mcp
from livegen.voice.chain import AttemptKind, Effect, Run
from livegen.voice.conversation import Item, item_from_wire

if TYPE_CHECKING:
    from livegen.voice.session import Session


def on_create(self: Session, event: wire.ItemCreate, now: float) -> list[Effect]:
    if self.model.is_duplex:
        raise duplex.refused_event(event.TYPE)
    raw_id = event.item.get("id")
    item = item_from_wire(event.item, raw_id if isinstance(raw_id, str) and raw_id else self.ids("item"))
    if item.type == "mcp_approval_response":
        return _on_approval(self, item, event.previous_item_id, now)
    # The call ledger is asked first and written last, so a refused item changes nothing.
    if item.type == "function_call_output":
        self.calls.check_output(item.call_id)
    elif item.type == "function_call" and item.call_id in self.calls:
        detail = f"a function call with call_id {item.call_id!r} already exists"
        raise INVALID_VALUE.error(detail=detail, param="item.call_id")
    previous = self.conversation.add(item, event.previous_item_id)
    if item.type == "function_call_output":
        self.calls.answer(item.call_id)
    elif item.type == "function_call":
        self.calls.open(item.call_id, "")
    return [
        self._send(ev.ItemAdded(item=item.to_object(), previous_item_id=previous)),
        self._send(ev.ItemDone(item=item.to_object(), previous_item_id=previous)),
    ]


def _on_approval(self: Session, item: Item, previous_item_id: str | None, now: float) -> list[Effect]:
    """The client's answer to a pending MCP approval request: the model may call, or not."""
    request_id = mcp.check_answer(item, self.response)
    previous = self.conversation.add(item, previous_item_id)
    assert self.response is not None  # check_answer found the request in it
    mcp.answered(self.response, request_id)
    approve = bool((item.mcp or {}).get("approve"))
    attempt = self.chain.add(AttemptKind.APPROVE, self.epoch, now, item_id=request_id, approve=approve)
    return [
        self._send(ev.ItemAdded(item=item.to_object(), previous_item_id=previous)),
        self._send(ev.ItemDone(item=item.to_object(), previous_item_id=previous)),
        Run(attempt),
    ]


def on_retrieve(self: Session, event: wire.ItemRetrieve, now: float) -> list[Effect]:
    item = self.conversation.get(event.item_id, ITEM_RETRIEVE_INVALID_ITEM_ID)
    return [self._send(ev.ItemRetrieved(item=item.to_object()))]


def on_delete(self: Session, event: wire.ItemDelete, now: float) -> list[Effect]:
    self.conversation.get(event.item_id, ITEM_DELETE_INVALID_ITEM_ID)
    effects: list[Effect] = []
    if (
        self.response is not None
        and self.response.item is not None
        and self.response.item.id == event.item_id
    ):
        effects += self.interrupt(now, "client_cancelled")
    self.conversation.delete(event.item_id)
    effects.append(self._send(ev.ItemDeleted(item_id=event.item_id)))
    return effects


def on_truncate(self: Session, event: wire.ItemTruncate, now: float) -> list[Effect]:
    item = self.conversation.get(event.item_id, ITEM_TRUNCATE_INVALID_ITEM_ID)
    self.speaker.heard.check_truncate(item, event.content_index, event.audio_end_ms)
    effects: list[Effect] = []
    if self.response is not None and self.response.item is item:
        effects += self.interrupt(now, "client_cancelled")
    effects.append(self.speaker.heard.cut(item, event.audio_end_ms, now))
    return effects
