"""The embedded voice model: Silero VAD -> Whisper (base or tiny.en) -> a reply -> Piper, offline on a CPU.

Modules, in the order audio flows: ``vad`` (turns), ``asr`` (transcripts),
``responder`` and ``arithmetic`` (the built-in replies) or ``llm`` (an
OpenAI-compatible endpoint), ``sentences`` (pieces to speak), ``tts`` and
``tts_worker`` (speech, in a separate GPL process), ``stream`` (one session),
``model`` (what sessions share, and the registry's ``load``). Importing this
package imports none of the heavy dependencies.
"""

from __future__ import annotations

import os
from typing import Any

from livegen.models.voice import SHARED_SPEECH_ENV


def load(settings: Any = None) -> Any:
    """The registry's loader (``livegen.models.cascade:load``): the model of this process, or, in a
    server process of a cluster, a view of the cluster's speech service (``service``).
    ``settings`` is a ``settings.CascadeSettings`` (None: each option's variable, else its default)."""
    if os.environ.get(SHARED_SPEECH_ENV):
        from livegen.models.cascade import service

        return service.connect(settings)
    from livegen.models.cascade import model

    return model.load(settings)
