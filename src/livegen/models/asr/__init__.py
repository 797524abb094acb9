"""Recognisers beside the cascade's CTranslate2 Whisper: transformers' speech-to-text classes.

``transformers_asr`` adapts the stock ``parakeet`` (CTC), ``kyutai_speech_to_text``
and ``voxtral_realtime`` classes to the cascade's recogniser interface, from a
user's local weights (``--asr-model-path``) or, in CI, from a fixed-seed random
tiny configuration (as ``causal-wan-tiny`` is for worlds).
"""
