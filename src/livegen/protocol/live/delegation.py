"""Client delegation (``{"type": "client"}``): the cascade's language model hands a task to the client.

GPT-Live's model delegates work it cannot do itself; under client delegation
the session says so with ``session.delegation.created`` (the delegation's id and
target, never the task's text: the client reads the task from the transcripts)
and the client answers with a ``session.commentary.append`` carrying that id,
which the model then speaks from. A cascade's language model has no such act of
its own, so the dialect offers it one function tool, ``DELEGATE``, and maps its
calls onto delegations: a call becomes a delegation (its id livegen's own), and
the commentary answering it becomes that call's ``function_call_output`` and a
response, so the model speaks the result in its own words.

Under ``{"type": "responses"}`` delegation the task is livegen's to run: the
call is ``session.delegation.created`` with ``target: "responses"``, and the
dialect asks the voice session for an out-of-band text response
(``delegated_response``: ``conversation: "none"``, the delegation's
instructions, the task as its one input, no tools), on the session's own
language model; its text is the call's output, and the model speaks from it.
Its lifecycle reaches the client as ``response.event`` (``created``,
``completed``), with the delegation's id.

A delegation is answered once: a second commentary with its id, or one naming an
id this session never created, is refused (the session goes on). Thinking and
instructions appends may name a delegation of the session too (context for it;
nothing is answered). Sans-IO: ids are counted, never random.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from livegen.protocol import errors as wire_errors
from livegen.protocol.live import events as live

#: The function tool a language model delegates with (its calls never reach the client as calls).
DELEGATE_NAME = "delegate_to_client"
DELEGATE: dict[str, Any] = {
    "type": "function",
    "name": DELEGATE_NAME,
    "description": (
        "Hand a task you cannot do yourself (looking something up, acting for the user) to the "
        "application. Its result comes back to you to tell the user."
    ),
    "parameters": {
        "type": "object",
        "properties": {"task": {"type": "string", "description": "What to do, in a sentence."}},
        "required": ["task"],
    },
}


Target = Literal["client", "responses"]
#: The ``event_id`` prefix of a delegated task's out-of-band response (the delegation's id follows).
DELEGATED_RESPONSE = "live_delegated_"
#: The delegated task's instructions when the delegation names none.
DELEGATED_INSTRUCTIONS = "Do the task you are given and answer with its result, briefly, in plain words."


def delegated_response(delegation_id: str, arguments: str, config: dict[str, Any] | None) -> dict[str, Any]:
    """The out-of-band text response that runs a Responses-delegated task (``DELEGATE``'s arguments)."""
    try:
        task = str(json.loads(arguments).get("task") or arguments)
    except (ValueError, AttributeError):
        task = arguments
    instructions = str((config or {}).get("instructions") or DELEGATED_INSTRUCTIONS)
    content = [{"type": "input_text", "text": task}]
    response = {
        "conversation": "none",
        "output_modalities": ["text"],
        "instructions": instructions,
        "tools": [],
        "metadata": {"delegation_id": delegation_id},
        "input": [{"type": "message", "role": "user", "content": content}],
    }
    return {"type": "response.create", "event_id": DELEGATED_RESPONSE + delegation_id, "response": response}


def response_text(response: dict[str, Any]) -> str:
    """The text of a (delegated, text-only) response's output, as ``response.done`` carries it."""
    parts = [
        str(part.get("text") or part.get("transcript") or "")
        for item in response.get("output") or []
        for part in item.get("content") or []
    ]
    return "".join(parts)


@dataclass
class Delegations:
    """One session's client delegations: the open ones (id -> the language model's call) and the answered."""

    open: dict[str, str] = field(default_factory=dict)
    answered: set[str] = field(default_factory=set)
    _count: int = 0

    def created(
        self, call_id: str, offset_ms: int, event_id: str, target: Target = "client"
    ) -> live.DelegationCreated:
        """The language model called ``DELEGATE`` (``call_id``): the client is told of a new delegation."""
        self._count += 1
        delegation_id = f"deleg_{self._count:06d}"
        self.open[delegation_id] = call_id
        ref = live.DelegationRef(id=delegation_id, target=target)
        return live.DelegationCreated(event_id=event_id, delegation=ref, offset_ms=offset_ms)

    def check(self, delegation_id: str, event_id: str | None) -> None:
        """Refuse an id this session never created (``unknown_delegation_id``)."""
        if delegation_id not in self.open and delegation_id not in self.answered:
            raise wire_errors.LIVE_UNKNOWN_DELEGATION.error(delegation_id=delegation_id, event_id=event_id)

    def answer(self, delegation_id: str, content: str, event_id: str | None) -> dict[str, Any]:
        """The commentary answering ``delegation_id``: its call's output (raises for a bad id)."""
        self.check(delegation_id, event_id)
        if delegation_id in self.answered:
            raise wire_errors.LIVE_DELEGATION_ANSWERED.error(delegation_id=delegation_id, event_id=event_id)
        call_id = self.open.pop(delegation_id)
        self.answered.add(delegation_id)
        item = {"type": "function_call_output", "call_id": call_id, "output": content}
        created: dict[str, Any] = {"type": "conversation.item.create", "item": item}
        if event_id is not None:  # a refusal of the output (its call was cut) is the client's event's
            created["event_id"] = event_id
        return created
