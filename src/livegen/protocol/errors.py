"""Every error livegen sends on the voice wire: one table, OpenAI's words where OpenAI has them.

Clients match errors by code and often by message text (LiveKit drops
"Cancellation failed: no active response found" and nothing else; pipecat
fails a retrieve only on ``item_retrieve_invalid_item_id`` and treats any
other code as fatal), so an error's code, message and ``param`` are part of
the protocol. Each row here is one error: its ``error.type``, code, message
template, default ``param``, where it comes from, and when it is sent. Raise
sites build their exception from a row (``ITEM_DELETE_INVALID_ITEM_ID.error(
item_id=...)``); no code or message is written anywhere else in the voice
path, and ``tests/protocol/test_error_table.py`` checks both that and that
docs/voice-protocol.md shows this table as ``markdown_table()`` renders it.

Origins:

- ``openai``: code, message and param as OpenAI sends them (messages taken
  from what real clients and recorded sessions match);
- ``openai code``: OpenAI's code; OpenAI's message names the offending field
  in words of its own, ours says what was wrong;
- ``livegen``: an extension; OpenAI has no such error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from string import Formatter
from typing import Any, Literal

from livegen.errors import (
    CapacityExceeded,
    InvalidRequest,
    InvalidState,
    RemoteProtocolError,
    Unauthorized,
)

Origin = Literal["openai", "openai code", "livegen"]
#: ``param`` left to the row's default.
_DEFAULT: Any = object()


@dataclass(frozen=True)
class WireError:
    """One row of the table: an error as the client sees it."""

    code: str
    #: ``str.format`` template; ``{detail}`` rows carry a sentence written at the raise site.
    message: str
    origin: Origin
    when: str
    param: str | None = None
    #: ``error.type``: OpenAI's family of the error.
    error_type: str = "invalid_request_error"
    #: The exception that carries it through the cores; None: sent only as a body (model failures).
    kind: type[RemoteProtocolError] | None = InvalidRequest

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(name for _, name, _, _ in Formatter().parse(self.message) if name)

    def text(self, **fields: Any) -> str:
        return self.message.format(**fields)

    def error(
        self, *, param: str | None = _DEFAULT, event_id: str | int | None = None, **fields: Any
    ) -> RemoteProtocolError:
        """The exception to raise; ``param`` overrides the row's where the field varies."""
        if self.kind is None:
            raise TypeError(f"{self.code} is sent as a body, not raised")
        return self.kind(
            self.text(**fields),
            code=self.code,
            param=self.param if param is _DEFAULT else param,
            event_id=event_id,
        )

    def body(self, **fields: Any) -> dict[str, Any]:
        """``{type, code, message}``: a response's ``status_details.error``."""
        return {"type": self.error_type, "code": self.code, "message": self.text(**fields)}

    def http_body(self, **fields: Any) -> dict[str, Any]:
        """An HTTP refusal's body, OpenAI's: ``{"error": {type, code, message, param}}``."""
        return {"error": {**self.body(**fields), "param": self.param}}

    def event_body(self, **fields: Any) -> dict[str, Any]:
        """The ``error`` object of an ``error`` event not caused by one client event."""
        return {**self.body(**fields), "param": self.param, "event_id": None}


# --- decoding (protocol/realtime/, protocol/audio.py) ----------------------------------
INVALID_JSON = WireError(
    "invalid_json", "the message is not valid JSON: {detail}", "livegen", "malformed text"
)
INVALID_EVENT = WireError(
    "invalid_event", "{detail}", "livegen", "no `type`, not a JSON object, or a binary message"
)
UNKNOWN_EVENT_TYPE = WireError(
    "invalid_value",
    "Invalid value: '{event_type}'. Supported values are: {supported}.",
    "openai",
    "an unknown `type` (`supported` lists the event types this server takes, OpenAI's way)",
    "type",
)
INVALID_VALUE = WireError(
    "invalid_value", "{detail}", "openai code", "a field of the wrong shape or value (`param` names it)"
)
INVALID_TYPE = WireError(
    "invalid_type",
    "{detail}",
    "openai code",
    "a field of the wrong type, checked when the event is decoded (`param` is its dotted path)",
)
STRING_ABOVE_MAX_LENGTH = WireError(
    "string_above_max_length",
    "Invalid '{name}': string too long. Expected a string with maximum length {maximum}, "
    "but got a string with length {length} instead.",
    "openai",
    "a string longer than OpenAI allows (a transcription `prompt` over 1024 characters)",
)
MISSING_REQUIRED_PARAMETER = WireError(
    "missing_required_parameter",
    "Missing required parameter: '{name}'.",
    "openai",
    "an event without a field it needs (`param` names it)",
)
INVALID_BASE64 = WireError(
    "invalid_base64", "{detail}", "livegen", "audio that is not base64 or not whole samples", "audio"
)
INVALID_AUDIO_FORMAT = WireError(
    "invalid_audio_format", "{detail}", "livegen", "an unknown audio format or rate"
)
INVALID_IMAGE_FORMAT = WireError(
    "invalid_image_format",
    "You uploaded an unsupported image. Please make sure your image has of one the following "
    "formats: ['png', 'jpeg'].",
    "openai",
    "an `input_image` whose data URI is not base64 PNG or JPEG (the types Realtime takes)",
)
INVALID_IMAGE = WireError(
    "invalid_image",
    "The image data you provided does not represent a valid image. Please check your input and "
    "try again with one of the supported image formats: ['image/jpeg', 'image/png'].",
    "openai",
    "an `input_image` whose bytes are not the PNG or JPEG its data URI names",
)

# --- session.update (voice/config.py, voice/session.py) ----------------------------------
UNSUPPORTED_TURN_DETECTION = WireError(
    "unsupported_turn_detection",
    "turn detection {kind!r} is not supported; use 'server_vad', 'semantic_vad' or null",
    "livegen",
    "a turn detection type other than `server_vad`, `semantic_vad` or null",
)
CANNOT_UPDATE_VOICE = WireError(
    "cannot_update_voice",
    "Cannot update a conversation's voice if assistant audio is present.",
    "openai",
    "a voice change after the session has spoken",
    "session.audio.output.voice",
    kind=InvalidState,
)
MODEL_CHANGE_UNSUPPORTED = WireError(
    "model_change_unsupported",
    "the session already uses {model!r}: the model can change only before the first append or response",
    "livegen",
    "`session.model` changed after the first append or response",
    "session.model",
    kind=InvalidState,
)
AUDIO_FORMAT_FIXED = WireError(
    "invalid_value",
    "Invalid value for '{field}': this session's audio is {fixed} and cannot change (a WebRTC"
    " call's track is Opus, decoded to and encoded from it); this update asked for {asked}."
    " The session is unchanged.",
    "openai code",
    "a WebRTC call's `session.update` that changes an audio format or rate (`param` names it)",
)
MODEL_NOT_FOUND = WireError(
    "model_not_found",
    "The model `{model}` does not exist or you do not have access to it.",
    "openai",
    "a model name that is neither served nor an alias (at connect: the socket closes after it)",
)

# --- input audio (voice/ledger.py, voice/session.py) -------------------------------------
INPUT_AUDIO_BACKPRESSURE = WireError(
    "input_audio_backpressure",
    "input audio backpressure: {pending} bytes are waiting for the model and {size} more would pass "
    "the {budget}-byte budget; slow down and resend this append",
    "livegen",
    "the append would pass the session's input budget; resend later, nothing accepted is lost",
    "audio",
    kind=CapacityExceeded,
)
INPUT_AUDIO_BUFFER_COMMIT_EMPTY = WireError(
    "input_audio_buffer_commit_empty",
    "Error committing input audio buffer: buffer too small. Expected at least {min_ms}ms of audio, "
    "but buffer only has {buffered_ms:.2f}ms of audio.",
    "openai",
    "a commit with no audio since the last one",
    kind=InvalidState,
)
TOO_MANY_PENDING_COMMITS = WireError(
    "too_many_pending_commits",
    "{pending} commits are already waiting for the model; wait for their items",
    "livegen",
    "more than 4 commits queued for the model",
    kind=CapacityExceeded,
)

# --- conversation items (voice/conversation.py, voice/session.py) ------------------------
ITEM_CREATE_DUPLICATE_ITEM_ID = WireError(
    "item_create_duplicate_item_id",
    "Error adding item: an item with id '{item_id}' already exists.",
    "openai",
    "`conversation.item.create` with an id already in the conversation",
)
PREVIOUS_ITEM_NOT_FOUND = WireError(
    "item_not_found",
    "previous_item_id {item_id!r} is not in the conversation",
    "livegen",
    "`conversation.item.create` after an unknown `previous_item_id`",
    "previous_item_id",
)
ITEM_RETRIEVE_INVALID_ITEM_ID = WireError(
    "item_retrieve_invalid_item_id",
    "Error retrieving item: the item with id '{item_id}' does not exist.",
    "openai",
    "`conversation.item.retrieve` of an unknown id",
)
ITEM_DELETE_INVALID_ITEM_ID = WireError(
    "item_delete_invalid_item_id",
    "Error deleting item: the item with id '{item_id}' does not exist.",
    "openai",
    "`conversation.item.delete` of an unknown id",
)
ITEM_TRUNCATE_INVALID_ITEM_ID = WireError(
    "item_truncate_invalid_item_id",
    "Error truncating item: the item with id '{item_id}' does not exist.",
    "openai",
    "`conversation.item.truncate` of an unknown id",
)
TRUNCATE_BEYOND_AUDIO = WireError(
    "invalid_value",
    "Audio content of {audio_ms:.0f}ms is already shorter than {audio_end_ms}ms",
    "openai",
    "truncate past the item's audio by more than 250 ms (within that, clamped)",
    "audio_end_ms",
)

# --- responses (voice/session.py, voice/output.py) ---------------------------------------
CONVERSATION_ALREADY_HAS_ACTIVE_RESPONSE = WireError(
    "conversation_already_has_active_response",
    "Conversation already has an active response in progress: {response_id}. "
    "Wait until the response is finished before creating a new one.",
    "openai",
    "`response.create` while one runs",
    kind=InvalidState,
)
NO_RESPONSES_IN_TRANSCRIPTION = WireError(
    "no_responses_in_transcription_session",
    "a transcription session transcribes input audio and creates no responses",
    "livegen",
    "`response.create` in a session of `type: transcription`",
    kind=InvalidState,
)
NO_LANGUAGE_MODEL = WireError(
    "invalid_value",
    "translation sessions need a language model to translate with: start the server with "
    "--llm-base-url (an OpenAI-compatible chat endpoint)",
    "livegen",
    "a translation session (`/v1/realtime/translations`) or key on a server without `--llm-base-url`",
    "model",
)
RESPONSE_CANCEL_NOT_ACTIVE = WireError(
    "response_cancel_not_active",
    "Cancellation failed: no active response found",
    "openai",
    "`response.cancel` with none running (or naming another)",
    kind=InvalidState,
)
UNKNOWN_RESPONSE = WireError(
    "unknown_response",
    "playback.ack must name a recent response_id or item_id",
    "livegen",
    "`playback.ack` for a response the session no longer tracks",
    "response_id",
)
FUNCTION_CALL_UNKNOWN = WireError(
    "unknown_call_id",
    "no function call {call_id!r} is waiting for an output",
    "livegen",
    "a `function_call_output` for a call_id the model never made (nothing changes)",
    "item.call_id",
)
FUNCTION_CALL_ANSWERED = WireError(
    "duplicate_function_call_output",
    "function call {call_id!r} already has its output",
    "livegen",
    "a second `function_call_output` for the same call_id (nothing changes)",
    "item.call_id",
    kind=InvalidState,
)
FUNCTION_CALL_ABANDONED = WireError(
    "function_call_abandoned",
    "function call {call_id!r} was abandoned: its response was interrupted before the output came",
    "livegen",
    "a `function_call_output` for a call whose response was cancelled or cut by a barge-in",
    "item.call_id",
    kind=InvalidState,
)
MODEL_FAILED = WireError(
    "model_error",
    "{detail}",
    "livegen",
    "the model failed: an `error` event, or the `response.done` (`failed`) of its response",
    error_type="server_error",
    kind=None,
)
ASR_UNAVAILABLE = WireError(
    "asr_unavailable",
    "{detail}",
    "livegen",
    "in `response.done` (`failed`): the remote recogniser (`--asr-base-url`) was down, too slow, "
    "answered an error or no transcript, so the turn has none",
    error_type="server_error",
    kind=None,
)
TTS_UNAVAILABLE = WireError(
    "tts_unavailable",
    "{detail}",
    "livegen",
    "in `response.done` (`failed`): the remote voice (`--tts-base-url`) was down, too slow, "
    "answered an error or no audio",
    error_type="server_error",
    kind=None,
)
SPEECH_SERVICE_UNAVAILABLE = WireError(
    "speech_service_unavailable",
    "{detail}",
    "livegen",
    "in `response.done` (`failed`): the cluster's shared speech service (`--workers`) died or was "
    "unreachable while it served this response; Ray restarts it and the next response is served",
    error_type="server_error",
    kind=None,
)
LOCKSTEP_SERVICE_UNAVAILABLE = WireError(
    "lockstep_service_unavailable",
    "{detail}",
    "livegen",
    "an `error` event, then the socket closes: the cluster's service of a duplex model (`--workers`) "
    "died or was unreachable, and this session's state with it; Ray restarts it and new sessions "
    "are admitted",
    error_type="server_error",
    kind=None,
)
MODEL_APPEND_FAILED = WireError(
    "model_append_failed",
    "{detail}",
    "livegen",
    "the model refused input: that turn and its response are rolled back (`response.done` `failed`)",
    error_type="server_error",
    kind=None,
)
# The language model behind --llm-base-url (models/cascade/chat_stream.py): each ends its response
# `failed`, with the row's code in `status_details.error`; the session goes on.
LLM_FAILED = WireError(
    "llm_failed",
    "{detail}",
    "livegen",
    "in `response.done` (`failed`): the language model answered an error status, could not be"
    " reached, or broke the connection",
    error_type="server_error",
    kind=None,
)
LLM_MALFORMED_STREAM = WireError(
    "llm_malformed_stream",
    "{detail}",
    "livegen",
    "in `response.done` (`failed`): the language model sent an event that is not a chat-completion chunk",
    error_type="server_error",
    kind=None,
)
LLM_TIMEOUT = WireError(
    "llm_timeout",
    "{detail}",
    "livegen",
    "in `response.done` (`failed`): no first words or call within `--llm-first-token-timeout`, no"
    " end within `--llm-answer-timeout`, or a silent stream",
    error_type="server_error",
    kind=None,
)
LLM_OUTPUT_TOO_LARGE = WireError(
    "llm_output_too_large",
    "{detail}",
    "livegen",
    "in `response.done` (`failed`): a line, the words, the arguments or the calls of one answer"
    " passed `--llm-max-line-kib`, `--llm-max-text-kib`, `--llm-max-arguments-kib` or"
    " `--llm-max-tool-calls`, or its chunks passed 4 per token asked for",
    error_type="server_error",
    kind=None,
)
LLM_INVALID_TOOL_CALL = WireError(
    "llm_invalid_tool_call",
    "{detail}",
    "livegen",
    "in `response.done` (`failed`): the language model called a function the response did not"
    " declare, or with arguments that are not a JSON object",
    error_type="server_error",
    kind=None,
)
#: Model failures by the code a voice stream reports them with (``VoiceOutput.code``).
MODEL_FAILURES = {
    row.code: row
    for row in (LLM_FAILED, LLM_MALFORMED_STREAM, LLM_TIMEOUT, LLM_OUTPUT_TOO_LARGE, LLM_INVALID_TOOL_CALL)
}
OUTPUT_OVERFLOW = WireError(
    "output_overflow",
    "the model made audio faster than it can be paced out",
    "livegen",
    "in `response.done` (`failed`): the model outran pacing by more than 2 minutes of audio",
    error_type="server_error",
    kind=None,
)
OUTBOX_OVERFLOW = WireError(
    "outbox_overflow",
    "the client is not reading events fast enough",
    "livegen",
    "in `response.done` (`failed`): the client read too slowly to drain the response",
    error_type="server_error",
    kind=None,
)
UNSENT_BYTES_EXCEEDED = WireError(
    "unsent_bytes_exceeded",
    "the client is not reading: what is queued for it passed the server's budget",
    "livegen",
    "events queued for a client that does not read passed `--max-unsent-bytes` (or 576 events):"
    " the session ends (`session.closed` `outbox_overflow`, close 4002)",
    error_type="server_error",
    kind=None,
)

RATE_LIMIT_EXCEEDED = WireError(
    "rate_limit_exceeded",
    "{detail}",
    "openai code",
    "audio arrives faster than the session takes it (10x real time, bursts of 60 s of audio); "
    "nothing of the append is kept: resend it later or in smaller pieces",
    "audio",
    kind=CapacityExceeded,
)
INTERNAL_ERROR = WireError(
    "internal_error",
    "the session failed on an internal error and was closed; open a new session",
    "livegen",
    "a bug of livegen's ended the session: then `session.closed` (`reason: server_error`), close 1011",
    error_type="server_error",
    kind=None,
)

# --- connecting and resuming (server/realtime/voice.py, server/realtime/resume.py, server/http/auth.py) ---
INVALID_API_KEY = WireError(
    "invalid_api_key",
    "{detail}",
    "openai code",
    "a missing or wrong API key (HTTP 401 before the upgrade)",
    error_type="authentication_error",
    kind=Unauthorized,
)
TOO_MANY_CONNECTIONS = WireError(
    "too_many_connections",
    "the server holds {limit} connections; retry later",
    "livegen",
    "a WebSocket over `--max-connections`: refused with HTTP 503 before the upgrade",
    error_type="server_error",
    kind=None,
)
HOST_NOT_ALLOWED = WireError(
    "host_not_allowed",
    "host {host} is not allowed",
    "livegen",
    "a `Host` header naming none of the server's names (DNS rebinding): HTTP 403",
    kind=None,
)
ORIGIN_NOT_ALLOWED = WireError(
    "origin_not_allowed",
    "origin {origin} is not allowed (see --allowed-origins)",
    "livegen",
    "a browser `Origin` outside `--allowed-origins`: HTTP 403",
    kind=None,
)
MODEL_NOT_READY = WireError(
    "model_not_ready",
    "the voice model is still loading; retry shortly",
    "livegen",
    "at connect, before the model has loaded: the socket closes (1013)",
)
TOO_MANY_SESSIONS = WireError(
    "too_many_sessions",
    "the server holds {limit} voice sessions",
    "livegen",
    "at connect, over `--max-sessions`: the socket closes (1013)",
)
TOO_MANY_WORLD_SESSIONS = WireError(
    "too_many_sessions",
    "the server holds {limit} world sessions",
    "livegen",
    "a world session over the cluster's server-wide `--max-sessions`: HTTP 503 before the upgrade",
    kind=None,
)
REALTIME_CAPACITY = WireError(
    "realtime_capacity",
    "{detail}",
    "livegen",
    "at connect, a native duplex model's frame clock is full (its state pool, or its step already"
    " takes the frame period): the socket closes (1013)",
)
MODEL_OPEN_FAILED = WireError(
    "model_error",
    "the voice model {model!r} could not open a stream: {detail}",
    "livegen",
    "the model could not open a stream (at connect the socket closes, 1011)",
)
INVALID_RESUME = WireError(
    "invalid_resume",
    "{detail}",
    "livegen",
    "the first event is not a matching `session.resume`, `session.resume` inside a session, a"
    " resuming call's offer without a matching one, or a session whose formats a call's track"
    " cannot carry",
    kind=InvalidState,
)
SESSION_NOT_FOUND = WireError(
    "session_not_found",
    "{detail}",
    "livegen",
    "resume of an unknown, ended or expired session",
)
OWNER_BUSY = WireError(
    "owner_busy",
    "the server process that holds this {what} did not answer within {seconds:g} s; retry",
    "livegen",
    "a resume, attach or hangup relayed to a process of the cluster that is alive but did not"
    " answer in time (a socket closes 1013; HTTP 503)",
    kind=CapacityExceeded,
)
INVALID_RESUME_TOKEN = WireError(
    "invalid_resume_token", "the resume token does not match", "livegen", "resume with a wrong token"
)
RESUME_GAP = WireError(
    "resume_gap",
    "{detail}",
    "livegen",
    "the journal no longer reaches back to `last_event_seq`",
    "last_event_seq",
)

# --- vllm-omni's duplex dialect (protocol/realtime/duplex.py, server/realtime/voice.py) -----------------
UNSUPPORTED_PARAMETER = WireError(
    "unsupported_parameter",
    "unsupported parameter {name!r}: {detail}",
    "livegen",
    "duplex dialect: a field livegen cannot honour (`param` names it); refused, never ignored",
)
DUPLEX_UNSUPPORTED = WireError(
    "unsupported_parameter",
    "unsupported parameter {name!r}: {detail}",
    "livegen",
    "a native duplex (lockstep) model: a setting or event it cannot honour (`param` names it);"
    " refused, never ignored",
)
INVALID_EVENT_ACK = WireError(
    "invalid_event_ack",
    "{detail}",
    "livegen",
    "duplex dialect: `session.event_ack` without a seq, or of a seq never sent (vllm-omni's code)",
    "server_event_seq",
)
INVALID_SESSION_RESUME = WireError(
    "invalid_session_resume",
    "session.resume requires session_id, resume_token, and a non-negative last_received_server_event_seq",
    "livegen",
    "duplex dialect: a malformed `session.resume` (vllm-omni's code)",
)
SESSION_RESUME_EXPIRED = WireError(
    "session_resume_expired",
    "{detail}",
    "livegen",
    "duplex dialect: resume of an unknown, ended or expired session (vllm-omni's code)",
)
SESSION_RESUME_CONFLICT = WireError(
    "session_resume_conflict",
    "{detail}",
    "livegen",
    "duplex dialect: resume naming a seq never sent (vllm-omni's code)",
    "last_received_server_event_seq",
)

# --- OpenAI's GPT-Live dialect (protocol/live/, runtime/voice/live.py) ----------------------
UNKNOWN_PARAMETER = WireError(
    "unknown_parameter",
    "Unknown parameter: '{name}'.",
    "openai",
    "GPT-Live: a field the SDK's types do not have (`param` is its dotted path); the session goes on",
)
LIVE_NOT_STARTED = WireError(
    "session_not_started",
    "The session has not started: send session.start first.",
    "livegen",
    "GPT-Live: an event before `session.start` (the connection is closed)",
)
LIVE_ALREADY_STARTED = WireError(
    "session_already_started",
    "The session has already started.",
    "livegen",
    "GPT-Live: a second `session.start`",
)
LIVE_CLOSED = WireError(
    "session_closed",
    "The session is closed: no event is taken after session.close.",
    "livegen",
    "GPT-Live: an event after `session.close`",
    kind=InvalidState,
)
LIVE_APPEND_TOO_LONG = WireError(
    "append_too_long",
    "The {channel} append is {tokens} tokens long; the most one append may carry is {maximum}.",
    "livegen",
    "GPT-Live: an instructions, thinking or commentary append over the 500-token bound",
    "content",
)
LIVE_UNSUPPORTED = WireError(
    "unsupported_parameter",
    "unsupported parameter {name!r}: {detail}",
    "livegen",
    "GPT-Live: a setting or event this server cannot honour (`param` names it); refused, never ignored",
)
LIVE_UNKNOWN_DELEGATION = WireError(
    "unknown_delegation_id",
    "no delegation {delegation_id!r} in this session",
    "livegen",
    "GPT-Live: an append whose `delegation_id` this session never created (nothing changes)",
    "delegation_id",
)
LIVE_DELEGATION_ANSWERED = WireError(
    "delegation_already_answered",
    "delegation {delegation_id!r} already has its answer",
    "livegen",
    "GPT-Live: a second `session.commentary.append` answering the same client delegation (nothing changes)",
    "delegation_id",
    kind=InvalidState,
)

TABLE: tuple[WireError, ...] = tuple(v for v in dict(globals()).values() if isinstance(v, WireError))
#: Every code livegen can send on the voice wire.
CODES: frozenset[str] = frozenset(row.code for row in TABLE)
#: A model failure whose code names a remote stage that failed, by that code (else ``MODEL_FAILED``).
STAGE_FAILURES: dict[str, WireError] = {
    row.code: row
    for row in (ASR_UNAVAILABLE, TTS_UNAVAILABLE, SPEECH_SERVICE_UNAVAILABLE, LOCKSTEP_SERVICE_UNAVAILABLE)
}


def markdown_table() -> str:
    """The table as docs/voice-protocol.md shows it (a test keeps the two equal)."""
    lines = ["| code | type | message | param | origin | when |", "|---|---|---|---|---|---|"]
    for row in TABLE:
        message = re.sub(r"\{(\w+)[^}]*\}", r"{\1}", row.message).replace("|", "\\|")
        param = f"`{row.param}`" if row.param else ""
        lines.append(f"| `{row.code}` | {row.error_type} | {message} | {param} | {row.origin} | {row.when} |")
    return "\n".join(lines)


__all__ = ["CODES", "TABLE", "WireError", "markdown_table"]
