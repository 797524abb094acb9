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

from livegen.models.voice import SharedSpeech


def load(settings: Any = None, speech: SharedSpeech | None = None) -> Any:
    """The registry's loader (``livegen.models.cascade:load``): the model of this process, or, in a
    server process of a cluster, a view of the cluster's speech service (``speech``, handed over by
    the engine: ``cluster/speech.py``). ``settings`` is a ``settings.CascadeSettings`` (None: each
    option's variable, else its default)."""
    if speech is not None:
        return speech.connect(settings)
    from livegen.models.cascade import model

    return model.load(settings)
