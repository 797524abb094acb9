"""transformers' speech-to-text classes as recognisers: each tiny one loads and runs as a recogniser.

The tiny models' weights are random (a fixed seed), so what they "hear" is
meaningless; what is checked is that each family's real class, feature
extractor and ``generate`` run through the recogniser interface the cascade
uses (``transcribe``, ``transcribe_batch``, the batcher that serves every
session), the same way twice, and that a saved model directory is picked up
by ``--asr-model-path`` (``local_choice``) as that family, not as Whisper.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from livegen.errors import ConfigError
from livegen.models.asr import transformers_asr
from livegen.models.asr.local import local_choice
from livegen.models.cascade import asr, asr_batch

pytest.importorskip("transformers")

#: Two seconds of a tone with a little noise: something to hear, the same every run.
AUDIO = (
    0.3 * np.sin(2 * np.pi * 220 * np.arange(32_000) / 16_000)
    + 0.01 * np.random.default_rng(3).standard_normal(32_000)
).astype(np.float32)
WORDS = re.compile(r"^(w\d+( w\d+)*)?$")


@pytest.fixture(scope="module", params=sorted(transformers_asr.FAMILIES))
def tiny(request: pytest.FixtureRequest) -> transformers_asr.TransformersRecognizer:
    return transformers_asr.tiny(request.param)


def test_each_tiny_recogniser_transcribes_the_same_way_twice(
    tiny: transformers_asr.TransformersRecognizer,
) -> None:
    first = tiny.transcribe(AUDIO)
    assert isinstance(first, asr.Transcript)
    assert WORDS.match(first.text) and first.text, first.text
    again = transformers_asr.tiny(tiny.family.stem).transcribe(AUDIO)
    assert again.text == first.text  # the seed fixes the weights
    assert tiny.name == f"{tiny.family.stem}-tiny"


def test_each_tiny_recogniser_serves_a_batch_and_keeps_a_forced_prefix(
    tiny: transformers_asr.TransformersRecognizer,
) -> None:
    alone = tiny.transcribe(AUDIO).text
    batch = tiny.transcribe_batch([AUDIO, AUDIO[:16_000]], prefixes=["", "Hello there"])
    assert batch[0].text == alone
    assert batch[1].text.startswith("Hello there")
    assert tiny.logprobs(AUDIO, alone) == []


def test_each_tiny_recogniser_runs_behind_the_batcher_sessions_use(
    tiny: transformers_asr.TransformersRecognizer,
) -> None:
    batcher = asr_batch.Batcher(lambda name: tiny, workers=1).start()
    try:
        heard = batcher.submit(AUDIO, asr.Options(model=tiny.name)).result(timeout=120)
    finally:
        batcher.close()
    assert heard == tiny.transcribe(AUDIO).text


def test_a_saved_model_directory_is_a_recogniser_of_its_family(
    tiny: transformers_asr.TransformersRecognizer, tmp_path: Path
) -> None:
    directory = tmp_path / f"my-{tiny.family.stem}"
    tiny._model.save_pretrained(directory)
    tiny._feature_extractor.save_pretrained(directory)
    choice = local_choice(directory)
    assert choice.name == directory.name and tiny.family.model_class in choice.description
    loaded = asr.Recognizer.of(choice, threads=1)
    assert loaded.transcribe(AUDIO).text == tiny.transcribe(AUDIO).text


def test_a_directory_of_another_model_type_is_not_taken_for_one(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    assert transformers_asr.family_of(tmp_path) is None
    with pytest.raises(ConfigError, match="no CTranslate2 Whisper model"):
        local_choice(tmp_path)
