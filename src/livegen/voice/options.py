"""``response.create``'s options: what one response may override, parsed all-or-nothing.

A response takes the session's settings unless ``response.create`` names its
own: ``instructions`` (null means the session's, as OpenAI reads it),
``output_modalities``, ``tools`` and ``tool_choice``, ``metadata`` (echoed on
the response), ``max_output_tokens``, ``conversation`` (``"none"``: an
out-of-band response, kept out of the default conversation) and ``input``
(items, or ``item_reference``s to items of the conversation, that the model is
given instead of the history). Any bad field raises ``invalid_value`` with its
``param`` before the response exists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from livegen.models.voice import HistoryTurn, ResponseRequest
from livegen.protocol.audio import OutputEncoder
from livegen.protocol.errors import INVALID_VALUE
from livegen.protocol.realtime.fields import ReasoningShape
from livegen.protocol.realtime.session import format_object
from livegen.voice import tools as fn
from livegen.voice import usage
from livegen.voice.config import Config, reasoning_effort
from livegen.voice.conversation import Conversation, Item, history_of, item_from_wire
from livegen.voice.response import Response

#: OpenAI's bound on ``max_output_tokens`` for Realtime responses.
MAX_OUTPUT_TOKENS = 4096


@dataclass(frozen=True)
class ResponseOptions:
    instructions: str
    modalities: tuple[str, ...]
    metadata: dict[str, str] | None
    tools: tuple[fn.Tool, ...]
    tool_choice: fn.ToolChoice
    conversation: str = "auto"
    max_output_tokens: int | None = None
    #: The history to give the model instead of the conversation's (``input``), if given.
    input: tuple[HistoryTurn, ...] | None = None
    #: ``reasoning.effort`` for this response (the session's unless it names its own).
    reasoning_effort: str | None = None


def _refuse(detail: str, param: str) -> Exception:
    return INVALID_VALUE.error(detail=detail, param=param)


def response_options(
    overrides: dict[str, Any], config: Config, conversation: Conversation, ids: Callable[[str], str]
) -> ResponseOptions:
    # null is "not given", as OpenAI reads it (LiveKit sends instructions: null on every reply).
    instructions = overrides.get("instructions")
    if instructions is None:
        instructions = config.instructions
    if not isinstance(instructions, str):
        raise _refuse("response.instructions must be a string", "response.instructions")
    modalities = config.output_modalities
    for key in ("output_modalities", "modalities"):
        if key in overrides:
            value = overrides[key]
            if not isinstance(value, list) or not value or any(m not in ("audio", "text") for m in value):
                raise _refuse(f"response.{key} must list audio and/or text", f"response.{key}")
            modalities = ("audio",) if "audio" in value else ("text",)
    tools = config.tools
    if overrides.get("tools") is not None:
        tools = fn.parse_tools(overrides["tools"], "response.tools")
    if overrides.get("tool_choice") is not None:
        choice = fn.parse_tool_choice(overrides["tool_choice"], tools, "response.tool_choice")
    else:
        choice = config.tool_choice if fn.is_valid_choice(config.tool_choice, tools) else "auto"
    conversation_mode = overrides.get("conversation") or "auto"
    if conversation_mode not in ("auto", "none"):
        detail = f"response.conversation must be 'auto' or 'none', got {conversation_mode!r}"
        raise _refuse(detail, "response.conversation")
    return ResponseOptions(
        instructions=instructions,
        modalities=modalities,
        metadata=_metadata(overrides.get("metadata")),
        tools=tools,
        tool_choice=choice,
        conversation=conversation_mode,
        max_output_tokens=_max_output_tokens(
            overrides.get("max_output_tokens", overrides.get("max_response_output_tokens"))
        ),
        input=None if overrides.get("input") is None else _input(overrides["input"], conversation, ids),
        reasoning_effort=_effort(overrides.get("reasoning"), config),
    )


def _effort(value: Any, config: Config) -> str | None:
    """``response.reasoning.effort`` (its type is checked at decode); else the session's."""
    if not isinstance(value, dict) or value.get("effort") is None:
        return config.reasoning_effort
    return reasoning_effort(ReasoningShape(effort=value["effort"]), "response.reasoning")


def _max_output_tokens(value: Any) -> int | None:
    if value is None or value == "inf":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_OUTPUT_TOKENS:
        detail = f"response.max_output_tokens must be 1..{MAX_OUTPUT_TOKENS} or 'inf', got {value!r}"
        raise _refuse(detail, "response.max_output_tokens")
    return value


def _input(value: Any, conversation: Conversation, ids: Callable[[str], str]) -> tuple[HistoryTurn, ...]:
    """``response.input``: items given in full, or references to the conversation's."""
    if not isinstance(value, list):
        raise _refuse(f"response.input must be a list of items, got {value!r}", "response.input")
    items: list[Item] = []
    for index, raw in enumerate(value):
        param = f"response.input[{index}]"
        if not isinstance(raw, dict):
            raise _refuse(f"{param} must be an item or an item_reference", param)
        if raw.get("type") == "item_reference":
            item_id = raw.get("id")
            if not isinstance(item_id, str) or item_id not in conversation:
                raise _refuse(f"{param}.id {item_id!r} is not in the conversation", f"{param}.id")
            items.append(conversation.get(item_id))
        else:
            items.append(item_from_wire(raw, ids("item")))
    return tuple(history_of(items))


def _metadata(value: object) -> dict[str, str] | None:
    """``response.metadata`` as OpenAI bounds it: at most 16 pairs of strings (keys 64, values 512 chars)."""
    if value is None:
        return None
    is_valid = (
        isinstance(value, dict)
        and len(value) <= 16
        and all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= 512
            for k, v in value.items()
        )
    )
    if not is_valid:
        detail = "response.metadata must be an object of at most 16 string pairs (keys 64, values 512 chars)"
        raise _refuse(detail, "response.metadata")
    assert isinstance(value, dict)
    return dict(value)


def session_options(config: Config) -> ResponseOptions:
    """What a response the session starts itself (server VAD, the idle timeout) is made with."""
    return ResponseOptions(
        config.instructions,
        config.output_modalities,
        None,
        config.tools,
        config.tool_choice,
        reasoning_effort=config.reasoning_effort,
    )


def plan_response(
    options: ResponseOptions,
    config: Config,
    conversation: Conversation,
    response_id: str,
    epoch: int,
    output_rate: int,
) -> tuple[Response, ResponseRequest]:
    """The response to pre-create, and the request its model is given."""
    history = tuple(conversation.history() if options.input is None else options.input)
    response = Response(
        metadata=options.metadata,
        id=response_id,
        epoch=epoch,
        modalities=options.modalities,
        voice=config.voice,
        output_format=format_object(config.output_format),
        encoder=OutputEncoder(config.output_format, output_rate),
        conversation=options.conversation,
        max_output_tokens=options.max_output_tokens,
        request_words=usage.words(options.instructions, *(turn.text for turn in history)),
    )
    choice = options.tool_choice
    request = ResponseRequest(
        response_id=response.id,
        history=history,
        instructions=options.instructions,
        modalities=options.modalities,
        voice=config.voice,
        tools=tuple(t.to_chat() for t in options.tools) if choice != "none" else (),
        tool_choice=fn.chat_tool_choice(choice),
        max_output_tokens=response.max_output_tokens,
        truncation=config.truncation,
        reasoning_effort=options.reasoning_effort,
    )
    return response, request
