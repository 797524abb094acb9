"""The client's ``conversation.item.*`` events on a voice session: create (a message, a function
call or its output, an MCP approval), retrieve, delete and truncate.

They are the session's handlers (``Session._route`` names them), kept in a module of their own
because they are one concept, the client editing history, and ``session.py`` holds the session's
state and the rest of its table. Each takes the session first (as ``Owner``, the narrow view of it
they declare, so this module never imports the session) and keeps the session's rule: a refused
event changes nothing (promise V7), so checks come before writes.
"""

from __future__ import annotations

from typing import Protocol

from livegen.protocol import realtime as wire
from livegen.protocol.errors import (
    INVALID_VALUE,
    ITEM_DELETE_INVALID_ITEM_ID,
    ITEM_RETRIEVE_INVALID_ITEM_ID,
    ITEM_TRUNCATE_INVALID_ITEM_ID,
)
from livegen.protocol.realtime import server as ev
from livegen.voice import duplex, mcp
from livegen.voice.attempts import Attempts
from livegen.voice.calls import CallLedger
from livegen.voice.chain import AttemptKind, Effect, Run, Send
from livegen.voice.conversation import Conversation, Item, item_from_wire
from livegen.voice.output import Speaker
from livegen.voice.response import Response
from livegen.voice.settings import IdFactory, ModelFacts


class Owner(Protocol):
    """What the handlers read and change of their session (``session.Session``)."""

    @property
    def model(session) -> ModelFacts: ...

    @property
    def ids(session) -> IdFactory: ...

    @property
    def calls(session) -> CallLedger: ...

    @property
    def conversation(session) -> Conversation: ...

    @property
    def response(session) -> Response | None: ...

    @property
    def chain(session) -> Attempts: ...

    @property
    def epoch(session) -> int: ...

    @property
    def speaker(session) -> Speaker: ...

    def send(session, event: ev.ServerEvent) -> Send: ...

    def interrupt(session, now: float, reason: str) -> list[Effect]: ...


def on_create(session: Owner, event: wire.ItemCreate, now: float) -> list[Effect]:
    if session.model.is_duplex:
        raise duplex.refused_event(event.TYPE)
    raw_id = event.item.get("id")
    item = item_from_wire(event.item, raw_id if isinstance(raw_id, str) and raw_id else session.ids("item"))
    if item.type == "mcp_approval_response":
        return _on_approval(session, item, event.previous_item_id, now)
    # The call ledger is asked first and written last, so a refused item changes nothing.
    if item.type == "function_call_output":
        session.calls.check_output(item.call_id)
    elif item.type == "function_call" and item.call_id in session.calls:
        detail = f"a function call with call_id {item.call_id!r} already exists"
        raise INVALID_VALUE.error(detail=detail, param="item.call_id")
    previous = session.conversation.add(item, event.previous_item_id)
    if item.type == "function_call_output":
        session.calls.answer(item.call_id)
    elif item.type == "function_call":
        session.calls.open(item.call_id, "")
    return [
        session.send(ev.ItemAdded(item=item.to_object(), previous_item_id=previous)),
        session.send(ev.ItemDone(item=item.to_object(), previous_item_id=previous)),
    ]


def _on_approval(session: Owner, item: Item, previous_item_id: str | None, now: float) -> list[Effect]:
    """The client's answer to a pending MCP approval request: the model may call, or not."""
    request_id = mcp.check_answer(item, session.response)
    previous = session.conversation.add(item, previous_item_id)
    assert session.response is not None  # check_answer found the request in it
    mcp.answered(session.response, request_id)
    approve = bool((item.mcp or {}).get("approve"))
    attempt = session.chain.add(AttemptKind.APPROVE, session.epoch, now, item_id=request_id, approve=approve)
    return [
        session.send(ev.ItemAdded(item=item.to_object(), previous_item_id=previous)),
        session.send(ev.ItemDone(item=item.to_object(), previous_item_id=previous)),
        Run(attempt),
    ]


def on_retrieve(session: Owner, event: wire.ItemRetrieve, now: float) -> list[Effect]:
    item = session.conversation.get(event.item_id, ITEM_RETRIEVE_INVALID_ITEM_ID)
    return [session.send(ev.ItemRetrieved(item=item.to_object()))]


def on_delete(session: Owner, event: wire.ItemDelete, now: float) -> list[Effect]:
    session.conversation.get(event.item_id, ITEM_DELETE_INVALID_ITEM_ID)
    effects: list[Effect] = []
    if (
        session.response is not None
        and session.response.item is not None
        and session.response.item.id == event.item_id
    ):
        effects += session.interrupt(now, "client_cancelled")
    session.conversation.delete(event.item_id)
    effects.append(session.send(ev.ItemDeleted(item_id=event.item_id)))
    return effects


def on_truncate(session: Owner, event: wire.ItemTruncate, now: float) -> list[Effect]:
    item = session.conversation.get(event.item_id, ITEM_TRUNCATE_INVALID_ITEM_ID)
    session.speaker.heard.check_truncate(item, event.content_index, event.audio_end_ms)
    effects: list[Effect] = []
    if session.response is not None and session.response.item is item:
        effects += session.interrupt(now, "client_cancelled")
    effects.append(session.speaker.heard.cut(item, event.audio_end_ms, now))
    return effects
