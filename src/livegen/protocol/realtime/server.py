"""The OpenAI Realtime server events, typed: one struct per event kind, tagged by ``type``.

The voice core (``voice/``) builds these and returns them in ``Send`` effects;
only ``protocol/`` turns them into JSON (``encode``), so the wire's shape is
written down in one place, as ``protocol/world.py`` writes the world's. Field
order follows the order livegen has always sent (and OpenAI's reference), so
the encoded bytes did not change when the events stopped being dicts; every
field the GA protocol sends as ``null`` is ``None``, never left out.

``event_id`` is stamped by whoever emits the event (the core's id factory),
after the event is built, so ids keep the order they always had. Beta's names
for renamed events are subclasses with beta's tag (``beta.py``).
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from livegen.protocol.realtime.items import ContentPart, ItemObject
from livegen.protocol.realtime.response import ResponseObject
from livegen.protocol.realtime.session import AnySessionObject, BetaSessionObject


class ServerEvent(msgspec.Struct, tag_field="type", kw_only=True):
    event_id: str = ""


def type_of(event: ServerEvent) -> str:
    """The event's wire ``type`` (its tag)."""
    return str(event.__struct_config__.tag)


def type_of_class(cls: type[ServerEvent]) -> str:
    """The wire ``type`` of an event class."""
    return str(cls.__struct_config__.tag)


# --- the session -------------------------------------------------------------------------


class SessionCreated(ServerEvent, tag="session.created", kw_only=True):
    session: AnySessionObject | BetaSessionObject
    #: Set by the endpoint on the greeting of a resumable session; omitted otherwise.
    resume_token: str | UnsetType = UNSET


class SessionUpdated(ServerEvent, tag="session.updated", kw_only=True):
    session: AnySessionObject | BetaSessionObject
    resume_token: str | UnsetType = UNSET


class SessionResumed(ServerEvent, tag="session.resumed", kw_only=True):
    """livegen's greeting on a resuming link, before the replay (not itself numbered)."""

    session_id: str
    resume_token: str
    last_event_seq: int
    replay_from_seq: int
    latest_seq: int


class SessionClosed(ServerEvent, tag="session.closed", kw_only=True):
    session_id: str
    reason: str


class Error(ServerEvent, tag="error", kw_only=True):
    #: OpenAI's error body (``RemoteProtocolError.to_error_body``): type, code, message, param, event_id.
    error: dict[str, Any]


# --- input audio and turns ---------------------------------------------------------------


class InputAudioBufferCommitted(ServerEvent, tag="input_audio_buffer.committed", kw_only=True):
    item_id: str
    previous_item_id: str | None


class InputAudioBufferCleared(ServerEvent, tag="input_audio_buffer.cleared", kw_only=True):
    pass


class SpeechStarted(ServerEvent, tag="input_audio_buffer.speech_started", kw_only=True):
    audio_start_ms: int
    item_id: str


class SpeechStopped(ServerEvent, tag="input_audio_buffer.speech_stopped", kw_only=True):
    audio_end_ms: int
    item_id: str


class TimeoutTriggered(ServerEvent, tag="input_audio_buffer.timeout_triggered", kw_only=True):
    audio_start_ms: int
    audio_end_ms: int
    item_id: str


class OutputAudioBufferCleared(ServerEvent, tag="output_audio_buffer.cleared", kw_only=True):
    response_id: str | None


# A WebRTC call's answer track says when a response's audio starts and stops playing.
class OutputAudioBufferStarted(ServerEvent, tag="output_audio_buffer.started", kw_only=True):
    response_id: str


class OutputAudioBufferStopped(ServerEvent, tag="output_audio_buffer.stopped", kw_only=True):
    response_id: str


# --- the conversation --------------------------------------------------------------------


class ItemAdded(ServerEvent, tag="conversation.item.added", kw_only=True):
    item: ItemObject
    previous_item_id: str | None


class ItemDone(ServerEvent, tag="conversation.item.done", kw_only=True):
    item: ItemObject
    previous_item_id: str | None


class ItemRetrieved(ServerEvent, tag="conversation.item.retrieved", kw_only=True):
    item: ItemObject


class ItemDeleted(ServerEvent, tag="conversation.item.deleted", kw_only=True):
    item_id: str


class ItemTruncated(ServerEvent, tag="conversation.item.truncated", kw_only=True):
    item_id: str
    content_index: int
    audio_end_ms: int


class InputTranscriptionDelta(
    ServerEvent, tag="conversation.item.input_audio_transcription.delta", kw_only=True
):
    item_id: str
    content_index: int
    delta: str


class InputTranscriptionCompleted(
    ServerEvent, tag="conversation.item.input_audio_transcription.completed", kw_only=True
):
    item_id: str | None
    content_index: int
    transcript: str
    usage: dict[str, Any]
    #: When the session's ``include`` asks: {token, logprob, bytes} per token; omitted otherwise.
    logprobs: list[dict[str, Any]] | UnsetType = UNSET


# --- responses ---------------------------------------------------------------------------


class ResponseCreated(ServerEvent, tag="response.created", kw_only=True):
    response: ResponseObject


class ResponseDone(ServerEvent, tag="response.done", kw_only=True):
    response: ResponseObject


class ResponseListen(ServerEvent, tag="response.listen", kw_only=True):
    """Extension: the model chose to listen rather than answer."""

    response_id: str
    reason: str


class OutputItemAdded(ServerEvent, tag="response.output_item.added", kw_only=True):
    response_id: str
    output_index: int
    item: ItemObject


class OutputItemDone(ServerEvent, tag="response.output_item.done", kw_only=True):
    response_id: str
    output_index: int
    item: ItemObject


class ContentPartAdded(ServerEvent, tag="response.content_part.added", kw_only=True):
    part: ContentPart
    response_id: str
    item_id: str
    output_index: int
    content_index: int


class ContentPartDone(ServerEvent, tag="response.content_part.done", kw_only=True):
    part: ContentPart
    response_id: str
    item_id: str
    output_index: int
    content_index: int


class OutputTextDelta(ServerEvent, tag="response.output_text.delta", kw_only=True):
    delta: str
    response_id: str
    item_id: str
    output_index: int
    content_index: int


class OutputTextDone(ServerEvent, tag="response.output_text.done", kw_only=True):
    text: str
    response_id: str
    item_id: str
    output_index: int
    content_index: int


class OutputAudioTranscriptDelta(ServerEvent, tag="response.output_audio_transcript.delta", kw_only=True):
    delta: str
    response_id: str
    item_id: str
    output_index: int
    content_index: int


class OutputAudioTranscriptDone(ServerEvent, tag="response.output_audio_transcript.done", kw_only=True):
    transcript: str
    response_id: str
    item_id: str
    output_index: int
    content_index: int


class OutputAudioDelta(ServerEvent, tag="response.output_audio.delta", kw_only=True):
    #: Base64 of the wire-format audio.
    delta: str
    response_id: str
    item_id: str
    output_index: int
    content_index: int


class OutputAudioDone(ServerEvent, tag="response.output_audio.done", kw_only=True):
    response_id: str
    item_id: str
    output_index: int
    content_index: int


class FunctionCallArgumentsDelta(ServerEvent, tag="response.function_call_arguments.delta", kw_only=True):
    delta: str
    response_id: str
    item_id: str
    output_index: int
    call_id: str


class FunctionCallArgumentsDone(ServerEvent, tag="response.function_call_arguments.done", kw_only=True):
    name: str
    arguments: str
    response_id: str
    item_id: str
    output_index: int
    call_id: str


# --- remote MCP tools (the server calls them itself) -------------------------------------


class McpListToolsInProgress(ServerEvent, tag="mcp_list_tools.in_progress", kw_only=True):
    item_id: str


class McpListToolsCompleted(ServerEvent, tag="mcp_list_tools.completed", kw_only=True):
    item_id: str


class McpListToolsFailed(ServerEvent, tag="mcp_list_tools.failed", kw_only=True):
    item_id: str


class McpCallArgumentsDelta(ServerEvent, tag="response.mcp_call_arguments.delta", kw_only=True):
    response_id: str
    item_id: str
    output_index: int
    delta: str


class McpCallArgumentsDone(ServerEvent, tag="response.mcp_call_arguments.done", kw_only=True):
    response_id: str
    item_id: str
    output_index: int
    arguments: str


class McpCallInProgress(ServerEvent, tag="response.mcp_call.in_progress", kw_only=True):
    item_id: str
    output_index: int


class McpCallCompleted(ServerEvent, tag="response.mcp_call.completed", kw_only=True):
    item_id: str
    output_index: int


class McpCallFailed(ServerEvent, tag="response.mcp_call.failed", kw_only=True):
    item_id: str
    output_index: int


_encoder = msgspec.json.Encoder()


def encode(event: msgspec.Struct | dict[str, Any]) -> bytes:
    """One server event as JSON bytes (sent as a text message): a struct of this module or of a
    dialect's (``protocol/realtime/duplex.py``); a dict is an endpoint's own event."""
    return _encoder.encode(event)


def as_dict(event: msgspec.Struct | dict[str, Any]) -> dict[str, Any]:
    """An event or object as JSON builtins (for an edge that rewrites events as dicts, and tests)."""
    if isinstance(event, dict):
        return event
    built = msgspec.to_builtins(event)
    assert isinstance(built, dict)
    return built
