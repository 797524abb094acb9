"""The tool-call ledger: every function call the model made, and whether its output came.

A call is ``pending`` from the moment the session sends its
``response.function_call_arguments.done`` until the client's
``function_call_output`` for it arrives (``answered``). The ledger refuses,
before anything changes:

- an output for a call_id the model never made (``unknown_call_id``);
- a second output for an answered call (``duplicate_function_call_output``);
- an output for an ``abandoned`` call (``function_call_abandoned``).

A call is abandoned when the user interrupted the answer that asked for it: its
response ended cancelled, failed or incomplete, or its spoken audio was cut by
a barge-in. The user never heard the question through, so a late result would
be fed to the model as if current; it is refused instead, and the call's item
stays out of the model's history (see ``Conversation.history``). So history
holds exactly one output per call, and only for calls that stood.

The ledger is bounded (``MAX_CALLS``): the oldest settled calls are forgotten
first, and an output for a forgotten call is unknown.
"""

from __future__ import annotations

from enum import StrEnum

from livegen.protocol.errors import FUNCTION_CALL_ABANDONED, FUNCTION_CALL_ANSWERED, FUNCTION_CALL_UNKNOWN

MAX_CALLS = 1024


class CallState(StrEnum):
    PENDING = "pending"
    ANSWERED = "answered"
    ABANDONED = "abandoned"


class CallLedger:
    def __init__(self) -> None:
        #: call_id -> (state, the response that made it; "" for a call the client created).
        self._calls: dict[str, tuple[CallState, str]] = {}

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._calls

    def state(self, call_id: str) -> CallState | None:
        entry = self._calls.get(call_id)
        return None if entry is None else entry[0]

    def open(self, call_id: str, response_id: str) -> None:
        """The model made a call (its arguments are done): it waits for its output."""
        self._calls[call_id] = (CallState.PENDING, response_id)
        while len(self._calls) > MAX_CALLS:
            oldest = next((c for c, (s, _) in self._calls.items() if s is not CallState.PENDING), None)
            del self._calls[oldest if oldest is not None else next(iter(self._calls))]

    def check_output(self, call_id: str) -> None:
        """Raise the typed error if an output for ``call_id`` must be refused now."""
        state = self.state(call_id)
        if state is None:
            raise FUNCTION_CALL_UNKNOWN.error(call_id=call_id)
        if state is CallState.ANSWERED:
            raise FUNCTION_CALL_ANSWERED.error(call_id=call_id)
        if state is CallState.ABANDONED:
            raise FUNCTION_CALL_ABANDONED.error(call_id=call_id)

    def answer(self, call_id: str) -> None:
        self.check_output(call_id)
        self._calls[call_id] = (CallState.ANSWERED, self._calls[call_id][1])

    def abandon_response(self, response_id: str) -> list[str]:
        """Abandon the pending calls of ``response_id``; return their ids."""
        abandoned = [c for c, (s, r) in self._calls.items() if r == response_id and s is CallState.PENDING]
        for call_id in abandoned:
            self._calls[call_id] = (CallState.ABANDONED, response_id)
        return abandoned

    def pending(self) -> list[str]:
        return [c for c, (s, _) in self._calls.items() if s is CallState.PENDING]

    def counts(self) -> dict[CallState, int]:
        counts = dict.fromkeys(CallState, 0)
        for state, _ in self._calls.values():
            counts[state] += 1
        return counts
