"""The checks every part of a voice ``session.update`` shares, in OpenAI's words.

A field of the wrong type (``invalid_type``, naming the type expected and the
one given) and a value outside an enum (``invalid_value``, listing the values
as OpenAI lists them). ``config.py``, ``turn_detection.py`` and the rest of an
update's parts raise these, so each mistake reads the same wherever it is made.
"""

from __future__ import annotations

from typing import Any

from livegen.protocol.errors import INVALID_TYPE, INVALID_VALUE


def expect(value: Any, kind: type | tuple[type, ...], param: str) -> Any:
    """``value`` if it is a ``kind``; else ``invalid_type`` (a null where null means nothing)."""
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        detail = f"Invalid type for '{param}': expected a {names}, but got {type(value).__name__} instead."
        raise INVALID_TYPE.error(detail=detail, param=param)
    return value


def one_of(value: str, supported: tuple[str, ...], param: str) -> str:
    """``value`` if it is one of ``supported``; else OpenAI's ``invalid_value`` for an enum."""
    if value not in supported:
        names = [f"'{name}'" for name in supported]  # as OpenAI lists them: 'a', 'b', and 'c'
        listed = " and ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + f", and {names[-1]}"
        detail = f"Invalid value: '{value}'. Supported values are: {listed}."
        raise INVALID_VALUE.error(detail=detail, param=param)
    return value
