"""A voice session's conversation: its items in order, and their wire form.

Items are what the model is given as history, so an assistant item holds only
what the listener heard: truncation (by the client, or by the session on an
interruption) shortens its audio and its transcript together. The history is
bounded in items (``MAX_ITEMS``) and in text (``MAX_HISTORY_CHARS``, about a
megabyte): the oldest items leave first, as a model's context would drop them,
and a client item longer than the whole budget is refused. A session, live or
parked for a resume, so never holds more than about a megabyte of history.

A user message may carry images (``input_image`` parts after its text or
audio part), for a vision-capable language model. An image is a ``data:`` URI
of PNG or JPEG (what OpenAI's Realtime takes), and counts against the same
budget: one larger than the whole history holds is refused as too large, and a
URI of another type (or bytes that are not the image it names) with OpenAI's
``invalid_image_format`` / ``invalid_image``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from msgspec import UNSET

from livegen.models.voice import HistoryTurn
from livegen.protocol.errors import (
    INVALID_IMAGE,
    INVALID_IMAGE_FORMAT,
    INVALID_VALUE,
    ITEM_CREATE_DUPLICATE_ITEM_ID,
    ITEM_DELETE_INVALID_ITEM_ID,
    ITEM_RETRIEVE_INVALID_ITEM_ID,
    PREVIOUS_ITEM_NOT_FOUND,
    WireError,
)
from livegen.protocol.realtime.items import (
    ContentPart,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputImagePart,
    ItemObject,
    MessageItem,
    content_part,
)
from livegen.protocol.realtime.server import as_dict
from livegen.voice.mcp_items import approval_response, mcp_chars, mcp_history, mcp_object

MAX_ITEMS = 512
#: Characters of text (transcripts and text parts) a session's history holds at most.
MAX_HISTORY_CHARS = 1024 * 1024
#: The image types OpenAI's Realtime takes, with the bytes each file starts with.
IMAGE_TYPES = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff"}
IMAGE_DETAILS = ("auto", "low", "high")
#: At most this many images in one message.
MAX_IMAGES_PER_ITEM = 16


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
    #: ``message``, ``function_call`` (``text`` holds the arguments) or ``function_call_output``
    #: (``text`` holds the output).
    type: str = "message"
    call_id: str = ""
    name: str = ""
    #: A user message's images: ``(data URI, detail)``.
    images: tuple[tuple[str, str], ...] = ()
    #: An MCP item's own fields (``voice/mcp.py``): its server's label, and the rest by type (a
    #: list's tools, a call's output or error, an approval's answer).
    server_label: str = ""
    mcp: dict[str, Any] | None = None
    #: An assistant message's phase: ``commentary`` (a spoken preamble) or ``final_answer``.
    phase: str | None = None

    @property
    def chars(self) -> int:
        """What the item costs the history's budget: its text, its images' URIs, its MCP fields."""
        extra = mcp_chars(self.mcp) if self.mcp else 0
        return len(self.text or "") + sum(len(url) for url, _ in self.images) + extra

    def to_object(self) -> ItemObject:
        """The item as the wire carries it."""
        if self.type.startswith("mcp_"):
            return mcp_object(self)
        if self.type == "function_call":
            arguments = self.text or ""
            return FunctionCallItem(
                id=self.id, status=self.status, call_id=self.call_id, name=self.name, arguments=arguments
            )
        if self.type == "function_call_output":
            return FunctionCallOutputItem(
                id=self.id, status=self.status, call_id=self.call_id, output=self.text or ""
            )
        parts: list[ContentPart] = [content_part(self.content_type, self.text)] if self.content_type else []
        parts += [InputImagePart(url, detail) for url, detail in self.images]
        phase = UNSET if self.phase is None else self.phase
        return MessageItem(id=self.id, role=self.role, status=self.status, content=parts, phase=phase)

    def to_wire(self) -> dict[str, Any]:
        return as_dict(self.to_object())


_CONTENT_TYPES = {
    "user": ("input_text", "input_audio"),
    "system": ("input_text",),
    "assistant": ("output_text", "output_audio", "text"),
}


def item_from_wire(raw: dict[str, Any], item_id: str) -> Item:
    """A client-created item (``conversation.item.create``): a message, a call or a call's output."""
    kind = raw.get("type", "message")
    if kind in ("function_call", "function_call_output"):
        return _call_item(raw, item_id, kind)
    if kind == "mcp_approval_response":
        fields = approval_response(raw)
        return Item(id=item_id, role="user", content_type="", type=kind, mcp=fields)
    if kind != "message":
        detail = (
            f"item type {kind!r} is not supported; use message, function_call, function_call_output "
            "or mcp_approval_response"
        )
        raise INVALID_VALUE.error(detail=detail, param="item.type")
    role = raw.get("role")
    if role not in _CONTENT_TYPES:
        detail = f"item.role must be user, assistant or system, got {role!r}"
        raise INVALID_VALUE.error(detail=detail, param="item.role")
    content = raw.get("content")
    images: tuple[tuple[str, str], ...] = ()
    if role == "user" and isinstance(content, list):
        content, images = _images(content)
        if not content and images:  # an image alone: the message has no text part
            return Item(id=item_id, role=role, content_type="", images=images)
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
    if text is not None and len(text) > MAX_HISTORY_CHARS:
        detail = f"item text is {len(text)} characters; a session's history holds at most {MAX_HISTORY_CHARS}"
        raise INVALID_VALUE.error(detail=detail, param="item.content")
    if content_type == "text":
        content_type = "output_text"
    if text is not None and len(text) + sum(len(url) for url, _ in images) > MAX_HISTORY_CHARS:
        detail = f"the item's text and images pass a session's history ({MAX_HISTORY_CHARS} chars)"
        raise INVALID_VALUE.error(detail=detail, param="item.content")
    return Item(id=item_id, role=role, content_type=content_type, text=text, images=images)


def _images(content: list[Any]) -> tuple[list[Any], tuple[tuple[str, str], ...]]:
    """A user message's ``input_image`` parts, checked, and its other parts."""
    others: list[Any] = []
    images: list[tuple[str, str]] = []
    for index, part in enumerate(content):
        if isinstance(part, dict) and part.get("type") == "input_image":
            images.append(_image(part, f"item.content[{index}]"))
        else:
            others.append(part)
    if len(images) > MAX_IMAGES_PER_ITEM:
        detail = f"a message holds at most {MAX_IMAGES_PER_ITEM} images, got {len(images)}"
        raise INVALID_VALUE.error(detail=detail, param="item.content")
    if sum(len(url) for url, _ in images) > MAX_HISTORY_CHARS:
        detail = f"the item's images pass a session's history ({MAX_HISTORY_CHARS} chars of URI)"
        raise INVALID_VALUE.error(detail=detail, param="item.content")
    return others, tuple(images)


def _image(part: dict[str, Any], param: str) -> tuple[str, str]:
    """One ``input_image``: a base64 ``data:`` URI of PNG or JPEG, and its detail."""
    url, detail = part.get("image_url"), part.get("detail") or "auto"
    if not isinstance(url, str) or not url.startswith("data:"):
        raise INVALID_VALUE.error(
            detail=(
                f"Invalid image URL: '{param}.image_url'. Expected a base64-encoded data URL with an image "
                "MIME type (e.g. 'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='), but got a value without "
                "the 'data:' prefix."
            ),
            param=f"{param}.image_url",
        )
    if len(url) > MAX_HISTORY_CHARS:
        detail = f"{param}.image_url is {len(url)} characters; a session's history holds {MAX_HISTORY_CHARS}"
        raise INVALID_VALUE.error(detail=detail, param=f"{param}.image_url")
    if detail not in IMAGE_DETAILS:
        detail_text = f"Invalid value: '{detail}'. Supported values are: 'auto', 'low', and 'high'."
        raise INVALID_VALUE.error(detail=detail_text, param=f"{param}.detail")
    mime, _, data = url[len("data:") :].partition(",")
    kind, _, encoding = mime.partition(";")
    if kind.lower() not in IMAGE_TYPES or encoding.lower() != "base64":
        raise INVALID_IMAGE_FORMAT.error(param=f"{param}.image_url")
    try:
        head = base64.b64decode(data[:64] + "=" * (-len(data[:64]) % 4), validate=True)
    except (binascii.Error, ValueError):
        head = b""
    if not head.startswith(IMAGE_TYPES[kind.lower()]):
        raise INVALID_IMAGE.error(param=f"{param}.image_url")
    return url, str(detail)


def _call_item(raw: dict[str, Any], item_id: str, kind: str) -> Item:
    fields = ("call_id", "name", "arguments") if kind == "function_call" else ("call_id", "output")
    values: list[str] = []
    for name in fields:
        value = raw.get(name)
        if not isinstance(value, str) or (name != fields[-1] and not value):
            detail = f"a {kind} item needs item.{name} (a string), got {value!r}"
            raise INVALID_VALUE.error(detail=detail, param=f"item.{name}")
        values.append(value)
    if len(values[-1]) > MAX_HISTORY_CHARS:
        detail = (
            f"item.{fields[-1]} is {len(values[-1])} characters; history holds at most {MAX_HISTORY_CHARS}"
        )
        raise INVALID_VALUE.error(detail=detail, param=f"item.{fields[-1]}")
    role = "assistant" if kind == "function_call" else "tool"
    name = values[1] if kind == "function_call" else ""
    return Item(
        id=item_id, role=role, content_type="", text=values[-1], type=kind, call_id=values[0], name=name
    )


class Conversation:
    def __init__(self) -> None:
        self._items: dict[str, Item] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._items

    def items(self) -> list[Item]:
        return list(self._items.values())

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
        chars = self.chars()
        while len(self._items) > MAX_ITEMS or (chars > MAX_HISTORY_CHARS and len(self._items) > 1):
            oldest = self._items.pop(next(iter(self._items)))
            chars -= oldest.chars
        return before

    def chars(self) -> int:
        """Characters of text the history holds (what a parked session keeps, with its journal)."""
        return sum(item.chars for item in self._items.values())

    def get(self, item_id: str, missing: WireError = ITEM_RETRIEVE_INVALID_ITEM_ID) -> Item:
        """The item; an unknown id raises ``missing``, the error of the event that named it."""
        try:
            return self._items[item_id]
        except KeyError:
            raise missing.error(item_id=item_id) from None

    def find(self, item_id: str) -> Item | None:
        """The item, or ``None`` (it may have left the bounded history)."""
        return self._items.get(item_id)

    def delete(self, item_id: str) -> None:
        self.get(item_id, ITEM_DELETE_INVALID_ITEM_ID)
        del self._items[item_id]

    def history(self) -> list[HistoryTurn]:
        return history_of(self._items.values())


def history_of(items_: Iterable[Item]) -> list[HistoryTurn]:
    """What the model is given: messages with text, and each call that stood with its output.

    A call without an output (pending, or abandoned) is left out, and so is an output whose call
    is not there: chat endpoints refuse a tool call without its answer, and vice versa.
    """
    items = list(items_)
    calls = {i.call_id for i in items if i.type == "function_call" and i.status == "completed"}
    outputs = {i.call_id for i in items if i.type == "function_call_output"}
    turns: list[HistoryTurn] = []
    for item in items:
        if item.type == "mcp_call":  # the server's own call: the model sees it as a tool call
            turns += mcp_history(item)
        elif item.type == "message":
            if item.text or item.images:
                turns.append(HistoryTurn(item.role, item.text or "", images=item.images))
        elif item.call_id in calls and item.call_id in outputs:
            turns.append(HistoryTurn(item.role, item.text or "", item.type, item.call_id, item.name))
    return turns
