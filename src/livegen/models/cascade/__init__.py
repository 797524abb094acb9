"""The embedded voice model: Silero VAD -> Whisper (base or tiny.en) -> a reply -> Piper, offline on a CPU.

Modules, in the order audio flows: ``vad`` (turns), ``asr`` (transcripts),
``responder`` and ``arithmetic`` (the built-in replies) or ``llm`` (an
OpenAI-compatible endpoint), ``sentences`` (pieces to speak), ``tts`` and
``tts_worker`` (speech, in a separate GPL process), ``stream`` (one session),
``model`` (what sessions share, and the registry's ``load``). Importing this
package imports none of the heavy dependencies.
"""

from __future__ import annotations

from typing import Any


def load(settings: Any = None) -> Any:
    """The registry's loader (``livegen.models.cascade:load``); ``settings`` is a
    ``settings.CascadeSettings`` (None: each option's variable, else its default)."""
    from livegen.models.cascade import model

    return model.load(settings)
