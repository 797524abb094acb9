"""The response object (``response.created``, ``response.done``) as the Realtime wire carries it.

``status_details`` and ``usage`` keep their JSON shape (dicts): their fields
vary with the status and with what the model reported, and livegen only
passes them on.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from livegen.protocol.realtime.items import ItemObject
from livegen.protocol.realtime.session import AudioFormatObject


class ResponseAudioOutput(msgspec.Struct):
    format: AudioFormatObject
    voice: str


class ResponseAudio(msgspec.Struct):
    output: ResponseAudioOutput


class ResponseObject(msgspec.Struct, kw_only=True):
    id: str
    object: str = "realtime.response"
    status: str
    status_details: dict[str, Any] | None
    output: list[ItemObject]
    output_modalities: list[str]
    conversation_id: str | None
    audio: ResponseAudio
    max_output_tokens: int | Literal["inf"]
    metadata: dict[str, str] | None
    usage: dict[str, Any] | None
