"""transformers' speech-to-text classes as cascade recognisers: Parakeet CTC, Kyutai STT, Voxtral Realtime.

A user with weights on disk (a Hugging Face directory: ``config.json`` whose
``model_type`` is one of ``FAMILIES``, the weights, the processor's files)
passes it as ``--asr-model-path``; ``asr.local.local_choice`` sees the
``model_type`` and loads it here instead of as CTranslate2 Whisper. Nothing
is fetched: every ``from_pretrained`` is ``local_files_only``.

CI has no such weights, so each family also has a tiny configuration whose
weights are drawn from a fixed seed (``tiny``): it hears nothing, but it runs
the same class, the same feature extractor and the same ``generate`` as the
real one, so a change in transformers that breaks the adapter breaks a test.
A tiny model has no tokenizer; its token ids are written as ``w<id>`` words.

The adapter is a ``cascade.asr.Recognizer`` (a subclass that shares none of
Whisper's state) so the batcher, the streams and ``/v1/audio/transcriptions``
use it unchanged: ``transcribe`` and ``transcribe_batch`` decode on the
calling thread (the batcher's), torch on ``threads`` cores. Whisper's
decoding windows, prompt and forced prefix have no counterpart in these
models: a prompt is ignored, and a forced prefix (what live captions already
sent) is kept as the transcript's start when the model's words do not begin
with it. Token log probabilities are not offered (an empty list).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from livegen.errors import ConfigError
from livegen.models.cascade import asr

#: The seed of every tiny model's weights.
TINY_SEED = 26
#: Most tokens a tiny model generates: its words mean nothing, a few show that it ran.
TINY_MAX_TOKENS = 8


@dataclass(frozen=True)
class Family:
    """One transformers speech-to-text class and how to feed it."""

    #: The recogniser's name stem (``<stem>-tiny`` for the random one).
    stem: str
    #: ``config.json``'s ``model_type`` of real weights.
    model_type: str
    model_class: str
    feature_extractor_class: str
    #: Sample rate the feature extractor takes.
    rate: int
    tiny_config: Callable[[], Any]
    #: Inputs of ``generate`` for a tiny model (no processor, no tokenizer) from the features.
    tiny_inputs: Callable[[Any, dict[str, Any]], dict[str, Any]]


def _parakeet_tiny() -> Any:
    import transformers

    encoder = transformers.ParakeetEncoderConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        subsampling_conv_channels=16,
    )
    return transformers.ParakeetCTCConfig(encoder_config=encoder.to_dict(), vocab_size=40, pad_token_id=39)


def _kyutai_tiny() -> Any:
    import transformers

    codec = {
        "model_type": "mimi",
        "num_quantizers": 4,
        "audio_channels": 1,
        "hidden_size": 16,
        "num_filters": 4,
        "num_residual_layers": 1,
        "upsampling_ratios": [8, 4],
        "codebook_size": 16,
        "codebook_dim": 16,
        "vector_quantization_hidden_dimension": 16,
        "upsample_groups": 16,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "sliding_window": 4,
        "use_cache": False,
    }
    return transformers.KyutaiSpeechToTextConfig(
        codebook_vocab_size=17,
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=512,
        sliding_window=512,
        ffn_dim=48,
        num_codebooks=4,
        audio_bos_token_id=16,
        audio_pad_token_id=16,
        pad_token_id=0,
        bos_token_id=1,
        codec_config=codec,
    )


def _voxtral_tiny() -> Any:
    import transformers

    audio = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "head_dim": 16,
        "num_mel_bins": 128,
        "max_position_embeddings": 3000,
        "sliding_window": 750,
    }
    text = {
        "vocab_size": 64,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "max_position_embeddings": 4096,
        "sliding_window": 512,
        "pad_token_id": 11,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    return transformers.VoxtralRealtimeConfig(audio_config=audio, text_config=text)


def _features_only(config: Any, features: dict[str, Any]) -> dict[str, Any]:
    return {**features, "max_new_tokens": TINY_MAX_TOKENS}


def _voxtral_inputs(config: Any, features: dict[str, Any]) -> dict[str, Any]:
    """What Voxtral Realtime's processor makes with its Mistral tokenizer: the start token, then one
    padding token per delay step; the audio is added to the text stream, a token per 8 frames."""
    import torch

    text = config.text_config
    delay = config.default_num_delay_tokens
    ids = torch.tensor([[text.bos_token_id] + [text.pad_token_id] * delay])
    room = features["input_features"].shape[-1] // config.audio_length_per_tok - ids.shape[1]
    budget = max(1, min(TINY_MAX_TOKENS, room))
    return {**features, "input_ids": ids, "num_delay_tokens": delay, "max_new_tokens": budget}


FAMILIES = {
    family.stem: family
    for family in (
        Family(
            "parakeet",
            "parakeet_ctc",
            "ParakeetForCTC",
            "ParakeetFeatureExtractor",
            16_000,
            _parakeet_tiny,
            _features_only,
        ),
        Family(
            "kyutai-stt",
            "kyutai_speech_to_text",
            "KyutaiSpeechToTextForConditionalGeneration",
            "KyutaiSpeechToTextFeatureExtractor",
            24_000,
            _kyutai_tiny,
            _features_only,
        ),
        Family(
            "voxtral-realtime",
            "voxtral_realtime",
            "VoxtralRealtimeForConditionalGeneration",
            "VoxtralRealtimeFeatureExtractor",
            16_000,
            _voxtral_tiny,
            _voxtral_inputs,
        ),
    )
}


def family_of(directory: Path) -> Family | None:
    """The family of a Hugging Face directory by its ``config.json``'s ``model_type``; None for
    anything else (a CTranslate2 Whisper directory has no ``model_type``)."""
    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError):
        return None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    return next((f for f in FAMILIES.values() if f.model_type == model_type), None)


class TransformersRecognizer(asr.Recognizer):
    """A transformers speech-to-text model behind ``asr.Recognizer``'s methods."""

    def __init__(
        self,
        name: str,
        family: Family,
        model: Any,
        feature_extractor: Any,
        processor: Any | None = None,
        threads: int = 2,
    ) -> None:
        # Not Whisper: none of the parent's state is made, only the names its callers read.
        self.name = name
        self.beam_size = 1
        self.is_multilingual = family.stem != "parakeet"
        self.family = family
        self._model = model
        self._feature_extractor = feature_extractor
        self._processor = processor
        self._threads = max(1, threads)

    def transcribe(
        self,
        audio: np.ndarray,
        window_s: int | None = None,
        language: str = "",
        prompt: str = "",
        prefix: str = "",
    ) -> asr.Transcript:
        return self.transcribe_batch([audio], language, prompt, [prefix])[0]

    def transcribe_batch(
        self,
        audios: list[np.ndarray],
        language: str = "",
        prompt: str = "",
        prefixes: list[str] | None = None,
    ) -> list[asr.Transcript]:
        """Each utterance decoded alone (the families pad a batch differently; turns are short)."""
        prefixes = prefixes or [""] * len(audios)
        results = []
        for audio, prefix in zip(audios, prefixes, strict=True):
            text = asr.clean(self._hear(audio))
            prefix = prefix.strip()
            if prefix and not text.startswith(prefix):
                text = f"{prefix} {text}".strip()
            window = asr.window_for(len(audio) / asr.SAMPLE_RATE)
            results.append(asr.Transcript(text, window))
        return results

    def logprobs_batch(
        self, audios: list[np.ndarray], texts: list[str], language: str = ""
    ) -> list[list[asr.Logprob]]:
        return [[] for _ in texts]

    def _hear(self, audio: np.ndarray) -> str:
        import torch

        torch.set_num_threads(self._threads)
        samples = _resampled(np.asarray(audio, np.float32), self.family.rate)
        with torch.inference_mode():
            if self._processor is not None:
                inputs = self._processor(samples, sampling_rate=self.family.rate, return_tensors="pt")
                ids = self._model.generate(**inputs)
                return str(self._processor.batch_decode(ids, skip_special_tokens=True)[0])
            features = dict(
                self._feature_extractor(samples, sampling_rate=self.family.rate, return_tensors="pt")
            )
            ids = self._model.generate(**self.family.tiny_inputs(self._model.config, features))
        return " ".join(f"w{int(token)}" for token in ids[0].tolist())


def _resampled(audio: np.ndarray, rate: int) -> np.ndarray:
    if rate == asr.SAMPLE_RATE:
        return audio
    import soxr

    return np.asarray(soxr.resample(audio, asr.SAMPLE_RATE, rate), np.float32)


def tiny(stem: str, threads: int = 1) -> TransformersRecognizer:
    """The family ``stem``'s tiny model, its weights drawn from ``TINY_SEED``: CI's stand-in."""
    import torch
    import transformers

    family = FAMILIES[stem]
    torch.manual_seed(TINY_SEED)
    model = getattr(transformers, family.model_class)(family.tiny_config()).eval()
    extractor = getattr(transformers, family.feature_extractor_class)()
    return TransformersRecognizer(f"{stem}-tiny", family, model, extractor, threads=threads)


def from_directory(directory: Path, name: str, threads: int = 2) -> TransformersRecognizer:
    """The model of a local Hugging Face directory (``--asr-model-path``), offline.

    With a processor (feature extractor and tokenizer) the directory's own
    is used; a directory with a feature extractor alone (a tiny one saved
    by a test) decodes as the tiny models do.
    """
    import transformers

    family = family_of(directory)
    if family is None:
        raise ConfigError(
            f"{str(directory)!r} is none of {', '.join(f.model_type for f in FAMILIES.values())}"
        )
    model_class = getattr(transformers, family.model_class)
    model = model_class.from_pretrained(directory, local_files_only=True).eval()
    extractor_class = getattr(transformers, family.feature_extractor_class)
    extractor = extractor_class.from_pretrained(directory, local_files_only=True)
    processor = None
    if any((directory / name).is_file() for name in _TOKENIZER_FILES):
        processor = transformers.AutoProcessor.from_pretrained(directory, local_files_only=True)
    return TransformersRecognizer(name, family, model, extractor, processor, threads)


#: Files whose presence says a directory has a tokenizer, and so a processor.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tekken.json", "tokenizer.model")
