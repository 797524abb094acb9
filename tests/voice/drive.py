"""One call into a voice session core, and the effects it queued: how unit tests drive the core.

The core queues its effects (``voice/chain.py``'s ``queued``) and the runtime
drains them after each call; a test does the same, one call at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec

from livegen.voice.chain import Effect

P = ParamSpec("P")


def drive(call: Callable[P, None], *args: P.args, **kwargs: P.kwargs) -> list[Effect]:
    """Make ``call`` (a bound entry point of a ``Session``) and take what it queued."""
    call(*args, **kwargs)
    session = getattr(call, "__self__")  # noqa: B009 - a bound method's owner
    effects: list[Effect] = session.take_effects()
    return effects
