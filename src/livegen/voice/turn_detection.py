"""A voice session's turn detection: ``server_vad`` and ``semantic_vad``, as set by ``session.update``.

``ServerVad`` is the setting as the session keeps it (``config.Config``'s
``turn_detection``; ``None``: off, the client commits): one detector for both
kinds, ``semantic_vad`` timing its silence by ``eagerness`` where the model has
no end-of-turn model of its own. ``turn_detection`` applies an update's
object to the current setting: fields left out keep their values, a change of
kind starts from the kind's defaults, and every bound is checked here, before
the session changes (``turns.py`` acts on the setting, ``vad.py`` detects).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from msgspec import UNSET

from livegen.protocol.errors import INVALID_VALUE, UNSUPPORTED_TURN_DETECTION
from livegen.protocol.realtime.fields import TurnDetectionShape
from livegen.protocol.realtime.server import as_dict
from livegen.protocol.realtime.session import SemanticVadObject, ServerVadObject, TurnDetectionObject
from livegen.voice.checks import expect

#: ``semantic_vad`` where the model has no end-of-turn model (the cascade has one): its eagerness
#: picks how long a silence ends the turn ("low" waits longer for the user to go on).
SEMANTIC_SILENCE_MS = {"low": 1200, "medium": 700, "auto": 700, "high": 350}
#: The ``idle_timeout_ms`` livegen takes (the wire decoder checks the same range first).
IDLE_TIMEOUT_MS = (100, 3_600_000)


@dataclass(frozen=True)
class ServerVad:
    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    create_response: bool = True
    interrupt_response: bool = True
    idle_timeout_ms: int | None = None
    #: Set when the client asked for ``semantic_vad``: the same detector, timed by eagerness.
    eagerness: str | None = None

    def to_object(self) -> TurnDetectionObject:
        if self.eagerness is not None:
            return SemanticVadObject(self.eagerness, self.create_response, self.interrupt_response)
        return ServerVadObject(
            self.threshold,
            self.prefix_padding_ms,
            self.silence_duration_ms,
            self.create_response,
            self.interrupt_response,
            self.idle_timeout_ms,
        )

    def to_wire(self) -> dict[str, Any]:
        return as_dict(self.to_object())


def turn_detection(
    value: TurnDetectionShape | None, current: ServerVad | None, param: str
) -> ServerVad | None:
    if value is None:
        return None
    kind = "server_vad" if value.type is UNSET else value.type
    if kind == "semantic_vad":
        return _semantic_vad(value, current, param)
    if kind != "server_vad":
        raise UNSUPPORTED_TURN_DETECTION.error(kind=kind, param=f"{param}.type")
    vad = current if current is not None and current.eagerness is None else ServerVad()
    updates: dict[str, Any] = {}
    if value.threshold is not UNSET:
        threshold = expect(value.threshold, (int, float), f"{param}.threshold")
        if not 0.0 <= threshold <= 1.0:
            raise INVALID_VALUE.error(
                detail=f"{param}.threshold must be in [0, 1]", param=f"{param}.threshold"
            )
        updates["threshold"] = float(threshold)
    for name, ms in (
        ("prefix_padding_ms", value.prefix_padding_ms),
        ("silence_duration_ms", value.silence_duration_ms),
    ):
        if ms is not UNSET:
            number = expect(ms, int, f"{param}.{name}")
            if not 0 <= number <= 10_000:
                raise INVALID_VALUE.error(
                    detail=f"{param}.{name} must be 0..10000 ms", param=f"{param}.{name}"
                )
            updates[name] = number
    updates.update(_response_flags(value, param))
    if value.idle_timeout_ms is not UNSET:
        updates["idle_timeout_ms"] = _idle_timeout(value.idle_timeout_ms, f"{param}.idle_timeout_ms")
    return replace(vad, **updates)


def _response_flags(value: TurnDetectionShape, param: str) -> dict[str, Any]:
    """``create_response`` and ``interrupt_response``, where the update names them."""
    flags = (("create_response", value.create_response), ("interrupt_response", value.interrupt_response))
    return {name: expect(flag, bool, f"{param}.{name}") for name, flag in flags if flag is not UNSET}


def _idle_timeout(value: int | None, param: str) -> int | None:
    """None (off) or MIN..MAX ms: a negative one would answer at once, forever, with no input."""
    if value is None:
        return None
    number: int = expect(value, int, param)
    low, high = IDLE_TIMEOUT_MS
    if not low <= number <= high:
        detail = f"Invalid value for '{param}': expected {low}..{high} ms, got {number}."
        raise INVALID_VALUE.error(detail=detail, param=param)
    return number


def _semantic_vad(value: TurnDetectionShape, current: ServerVad | None, param: str) -> ServerVad:
    eagerness = value.eagerness
    if eagerness is UNSET:
        eagerness = current.eagerness if current and current.eagerness else "auto"
    if not isinstance(eagerness, str) or eagerness not in SEMANTIC_SILENCE_MS:
        detail = f"{param}.eagerness must be one of {', '.join(SEMANTIC_SILENCE_MS)}, got {eagerness!r}"
        raise INVALID_VALUE.error(detail=detail, param=f"{param}.eagerness")
    vad = ServerVad(eagerness=eagerness, silence_duration_ms=SEMANTIC_SILENCE_MS[eagerness])
    return replace(vad, **_response_flags(value, param))
