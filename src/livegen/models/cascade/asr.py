"""Speech recognition: Whisper through CTranslate2, with a short decoding window.

Two recognisers ship (``CHOICES``): Whisper base, the default (``DEFAULT``), and
Whisper tiny.en, the fast option, with more words wrong at a third to a half of
base's compute; both come from pinned PyPI packages (``assets``). Any local
CTranslate2 Whisper directory (Whisper small, distil-whisper, a fine-tune) is a
third, named after its directory (``models/asr/local.py``, ``--asr-model-path``). Which one a server uses is
``--asr-model`` and a session may pick another with
``audio.input.transcription.model`` (``model.CascadeModel`` loads each on
first use).

faster-whisper always pads audio to Whisper's 30 s window, which costs a
fixed second or so per utterance on two cores; a voice turn is a few seconds.
So ``Recognizer`` borrows faster-whisper's model, feature extractor and
tokenizer and calls CTranslate2 itself with the shortest window of 10, 20 or
30 s that holds the audio (the encoder's cost is linear in the window). Short
windows sometimes make Whisper loop on a phrase: a guard looks for a repeated
n-gram (and a token budget bounds the loop) and then decodes again with the
full 30 s window, which is what Whisper was trained on.

One ``Recognizer`` is shared by every session of a process; calls are
synchronous. ``workers`` decodes may run at once (CTranslate2's
``inter_threads``, replicas sharing the weights), each on ``threads`` cores
(``intra_threads``); ``transcribe_batch`` decodes several utterances in one
call, which ``asr_batch.Batcher`` uses to serve many sessions at once.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from livegen.models.cascade import settings

SAMPLE_RATE = 16_000
_FRAMES_PER_SECOND = 100
#: Decoding windows, shortest first; 30 s is Whisper's native one.
WINDOWS_S = (10, 20, 30)
#: Room left in a window after the audio, so a word at the very end is not cut.
_MARGIN_S = 0.5
#: Whisper emits about 3 tokens a second of speech; far more is a loop.
_TOKENS_PER_SECOND = 8
_MIN_TOKENS = 16
_WORD = re.compile(r"[\w']+")
#: Silence after the audio whose features are computed, not filled in: two of Whisper's 400-sample
#: FFT windows, so the last computed frames are of silence alone (the floor) and none reflects audio.
_SILENT_TAIL = 800
#: How much of a client's ``prompt`` is given to Whisper, in tokens (its context holds 224).
MAX_PROMPT_TOKENS = 100
#: Tokenised prompts kept (one per session that set one, at most 1024 characters each).
_PROMPTS_KEPT = 256
#: Encoder outputs of short audio kept for a scoring that follows its decode (about 1 MB each).
_ENCODED_KEPT = 16


@dataclass(frozen=True)
class Logprob:
    """One token of a transcript and Whisper's log probability of it (OpenAI's ``logprobs`` entry)."""

    token: str
    logprob: float

    def to_wire(self) -> dict[str, object]:
        return {"token": self.token, "logprob": self.logprob, "bytes": list(self.token.encode())}


@dataclass(frozen=True)
class Options:
    """A session's ``audio.input.transcription``: which recogniser, which language, what context."""

    model: str = ""
    language: str = ""
    prompt: str = ""
    #: Forced as the transcript's start: what live captions already sent.
    prefix: str = ""


@dataclass(frozen=True)
class Choice:
    """A recogniser a server or a session can pick by name."""

    name: str
    description: str
    #: Where its weights are: a directory, or files by name held in memory.
    weights: Callable[[], Path | dict[str, bytes]]
    #: 1 is greedy. Base with a beam of 5 hears a third fewer words wrong at 10 dB SNR than
    #: greedy, for 10% more compute; tiny.en stays greedy, the fast choice (see the README).
    beam_size: int = 1
    #: Builds a recogniser that is not CTranslate2 Whisper (``models/asr``), given threads and
    #: workers; None: ``weights`` are Whisper's.
    loader: Callable[[int, int], Recognizer] | None = None


def _tiny_en() -> Path:
    from livegen.models.cascade import assets

    return assets.whisper_dir()


def _base() -> dict[str, bytes]:
    from livegen.models.cascade import assets

    return assets.whisper_base_files()


CHOICES = {
    choice.name: choice
    for choice in (
        Choice("whisper-base", "Whisper base (74 M parameters, multilingual), int8, beam 5", _base, 5),
        Choice("whisper-tiny.en", "Whisper tiny.en (39 M parameters, English), int8", _tiny_en),
    )
}


#: The server's recogniser unless ``--asr-model`` (``LIVEGEN_ASR_MODEL``) says otherwise: stated
#: once, in ``settings`` (which imports nothing heavy, so ``livegen serve --help`` can name it).
DEFAULT = settings.ASR_MODEL


@dataclass(frozen=True)
class Transcript:
    text: str
    #: The window used in the end, in seconds.
    window_s: int
    #: Whether the repetition guard sent it back to the 30 s window.
    is_retried: bool = False


class Recognizer:
    def __init__(
        self, weights: Path | dict[str, bytes], threads: int = 2, name: str = DEFAULT, workers: int = 1
    ) -> None:
        from faster_whisper import WhisperModel

        self.name = name
        self.beam_size = 1
        # A copy: faster-whisper pops the tokenizer out of the dict it is given.
        files = dict(weights) if isinstance(weights, dict) else None
        self._whisper = WhisperModel(
            name if files is not None else str(weights),
            device="cpu",
            compute_type="int8",
            cpu_threads=threads,
            num_workers=workers,
            local_files_only=True,
            files=files,
        )
        self.is_multilingual = bool(self._whisper.model.is_multilingual)
        self._tokenizers: dict[str, Any] = {}
        #: Tokenised prompts by (language, prompt), the least recently used dropped first; decodes
        #: run on several threads at once.
        self._prompts: OrderedDict[tuple[str, str], tuple[int, ...]] = OrderedDict()
        self._prompts_lock = threading.Lock()
        #: Encoder outputs of recent short audio by its digest, for a scoring that follows a decode.
        self._encoded: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._encoded_lock = threading.Lock()

    @classmethod
    def named(cls, name: str, threads: int = 2, workers: int = 1) -> Recognizer:
        """The recogniser ``name`` of ``CHOICES``, its weights checked and loaded."""
        return cls.of(CHOICES[name], threads, workers)

    @classmethod
    def of(cls, choice: Choice, threads: int = 2, workers: int = 1) -> Recognizer:
        """The recogniser ``choice`` describes, its weights checked and loaded."""
        if choice.loader is not None:
            return choice.loader(threads, workers)
        recognizer = cls(choice.weights(), threads, choice.name, workers)
        recognizer.beam_size = choice.beam_size
        return recognizer

    def transcribe(
        self,
        audio: np.ndarray,
        window_s: int | None = None,
        language: str = "",
        prompt: str = "",
        prefix: str = "",
    ) -> Transcript:
        """Text of 16 kHz float audio; longer than 30 s is cut into 30 s pieces.

        ``window_s`` forces a decoding window (the benchmark's 30 s baseline).
        ``language`` (ISO-639-1) is honoured by multilingual models and
        English is assumed otherwise; ``prompt`` is Whisper's previous-text
        context (names, spellings), its last ``MAX_PROMPT_TOKENS`` tokens.
        ``prefix`` is forced as the transcript's start (live captions already
        sent it) and Whisper goes on from there; not for audio over 30 s.
        """
        limit = WINDOWS_S[-1] * SAMPLE_RATE
        if len(audio) > limit:
            pieces = [
                self.transcribe(audio[i : i + limit], None, language, prompt)
                for i in range(0, len(audio), limit)
            ]
            return Transcript(" ".join(p.text for p in pieces if p.text), WINDOWS_S[-1])
        window = window_s or window_for(len(audio) / SAMPLE_RATE)
        sequence = self._prompt(language, prompt)
        if prefix := prefix.strip():
            sequence += self._tokenizer(language).encode(" " + prefix)
            text = self._decode(audio, window, sequence)
            return Transcript(text if text.startswith(prefix) else _joined(prefix, text), window)
        text = self._decode(audio, window, sequence)
        if window < WINDOWS_S[-1] and is_repetitive(text):
            return Transcript(self._decode(audio, WINDOWS_S[-1], sequence), WINDOWS_S[-1], is_retried=True)
        return Transcript(text, window)

    def _prompt(self, language: str, prompt: str) -> list[int]:
        """The decoder's start: Whisper's previous-text token and the prompt's last tokens, if any,
        then its start sequence. A session's prompt is tokenised once, not at every decode."""
        tokenizer = self._tokenizer(language)
        sequence = [*tokenizer.sot_sequence, tokenizer.no_timestamps]
        if not prompt.strip():
            return sequence
        key = (language, prompt)
        with self._prompts_lock:
            context = self._prompts.get(key)
            if context is not None:
                self._prompts.move_to_end(key)
        if context is None:
            context = tuple(tokenizer.encode(" " + prompt.strip())[-MAX_PROMPT_TOKENS:])
            with self._prompts_lock:
                self._prompts[key] = context
                while len(self._prompts) > _PROMPTS_KEPT:
                    self._prompts.popitem(last=False)
        return [tokenizer.sot_prev, *context, *sequence]

    def _tokenizer(self, language: str) -> Any:
        from faster_whisper.tokenizer import _LANGUAGE_CODES, Tokenizer

        code = language.lower() if self.is_multilingual and language.lower() in _LANGUAGE_CODES else "en"
        if code not in self._tokenizers:
            self._tokenizers[code] = Tokenizer(
                self._whisper.hf_tokenizer, self.is_multilingual, task="transcribe", language=code
            )
        return self._tokenizers[code]

    def transcribe_batch(
        self,
        audios: list[np.ndarray],
        language: str = "",
        prompt: str = "",
        prefixes: list[str] | None = None,
    ) -> list[Transcript]:
        """``transcribe`` of each of ``audios`` (same language and prompt), one Whisper call for all.

        The batch is decoded in the window of its longest utterance: a shorter
        one in a longer window is what the repetition guard's retry does anyway.
        CTranslate2 wants Whisper's start token at the same position in every
        item, so items share the prompt; each may have its own ``prefix``.
        """
        prefixes = prefixes or [""] * len(audios)
        limit = WINDOWS_S[-1] * SAMPLE_RATE
        if len(audios) == 1 or any(len(audio) > limit for audio in audios):
            return [
                self.transcribe(a, None, language, prompt, p) for a, p in zip(audios, prefixes, strict=True)
            ]
        window = max(window_for(len(audio) / SAMPLE_RATE) for audio in audios)
        base = self._prompt(language, prompt)
        tokenizer = self._tokenizer(language)
        stripped = [prefix.strip() for prefix in prefixes]
        sequences = [base + tokenizer.encode(" " + p) if p else base for p in stripped]
        texts = self._decode_many(audios, window, sequences)
        results = []
        for audio, prefix, sequence, text in zip(audios, stripped, sequences, texts, strict=True):
            if prefix:
                results.append(Transcript(text if text.startswith(prefix) else _joined(prefix, text), window))
            elif window < WINDOWS_S[-1] and is_repetitive(text):
                retried = self._decode(audio, WINDOWS_S[-1], sequence)
                results.append(Transcript(retried, WINDOWS_S[-1], is_retried=True))
            else:
                results.append(Transcript(text, window))
        return results

    def _decode(self, audio: np.ndarray, window_s: int, prompt: list[int]) -> str:
        return self._decode_many([audio], window_s, [prompt])[0]

    def _decode_many(self, audios: list[np.ndarray], window_s: int, prompts: list[list[int]]) -> list[str]:
        encoded = self._encode(audios, window_s)
        budget = max(
            len(prompt) + max(_MIN_TOKENS, int(len(audio) / SAMPLE_RATE * _TOKENS_PER_SECOND))
            for audio, prompt in zip(audios, prompts, strict=True)
        )
        results: Any = self._whisper.model.generate(
            encoded,
            prompts,
            beam_size=self.beam_size,
            max_length=budget,
            suppress_blank=True,
            suppress_tokens=[-1],
        )
        tokenizer = self._tokenizer("en")
        return [
            clean(tokenizer.decode([t for t in result.sequences_ids[0] if t < tokenizer.eot]))
            for result in results
        ]

    def _encode(self, audios: list[np.ndarray], window_s: int) -> Any:
        """Whisper's encoder output for ``audios`` in a ``window_s`` window, one batch.

        The barge-in check decodes a held sound and then scores the words it
        heard against the same audio; the encoder is most of either's cost, so
        its output for short audio (the shortest window) is kept a while by
        the audio's digest, and a scoring of audio just decoded reuses it.
        """
        import ctranslate2

        keys = [_digest(audio) for audio in audios] if window_s == WINDOWS_S[0] else []
        with self._encoded_lock:
            kept = [row for key in keys if (row := self._encoded.get(key)) is not None]
        if keys and len(kept) == len(keys):
            return ctranslate2.StorageView.from_array(np.stack(kept))
        features = np.stack([self._features(audio, window_s) for audio in audios])
        encoded = self._whisper.model.encode(ctranslate2.StorageView.from_array(features))
        if keys:
            rows = np.array(encoded)
            with self._encoded_lock:
                for key, row in zip(keys, rows, strict=True):
                    self._encoded[key] = row
                while len(self._encoded) > _ENCODED_KEPT:
                    self._encoded.popitem(last=False)
        return encoded

    def _features(self, audio: np.ndarray, window_s: int) -> np.ndarray:
        """Whisper's log-Mel features of ``audio`` padded with silence to ``window_s``.

        Short audio in a long window (a barge-in check: 0.3 s in 10 s) is mostly
        padding, and every frame of silence comes out as the same floor (log-Mel
        clipped at 8 below the loudest frame), so only the audio and a little
        silence after it are transformed and the rest is filled with that floor:
        a fifth of the cost, the same features (to within float rounding).
        """
        frames, samples = window_s * _FRAMES_PER_SECOND, window_s * SAMPLE_RATE
        extract = self._whisper.feature_extractor
        if len(audio) + _SILENT_TAIL > samples:
            padded = np.zeros(samples, np.float32)
            padded[: len(audio)] = audio[:samples]
            whole: np.ndarray = extract(padded, padding=0)[:, :frames]
            return whole
        head: np.ndarray = extract(np.concatenate([audio, np.zeros(_SILENT_TAIL, np.float32)]), padding=0)
        features = np.full((head.shape[0], frames), head.min(), head.dtype)
        computed = min(frames, head.shape[1])
        features[:, :computed] = head[:, :computed]
        return features

    def logprobs(self, audio: np.ndarray, text: str, language: str = "") -> list[Logprob]:
        """Each token of ``text`` with the log probability Whisper gives it after the tokens before it,
        hearing ``audio`` (its first 30 s): OpenAI's transcription ``logprobs``, for any transcript,
        however it was put together (settled pieces, live captions)."""
        return self.logprobs_batch([audio], [text], language)[0]

    def logprobs_batch(
        self, audios: list[np.ndarray], texts: list[str], language: str = ""
    ) -> list[list[Logprob]]:
        """``logprobs`` of each (audio, text) pair, one alignment pass for all (CTranslate2's
        ``align`` forces the text's tokens and reports the probability of each)."""
        audios = [audio[: WINDOWS_S[-1] * SAMPLE_RATE] for audio in audios]
        scored = [i for i, text in enumerate(texts) if text.strip()]
        results: list[list[Logprob]] = [[] for _ in texts]
        if not scored:
            return results
        window = max(window_for(len(audios[i]) / SAMPLE_RATE) for i in scored)
        tokenizer = self._tokenizer(language)
        tokens = [tokenizer.encode(" " + texts[i].strip()) for i in scored]
        encoded = self._encode([audios[i] for i in scored], window)
        start = [*tokenizer.sot_sequence, tokenizer.no_timestamps]
        frames = [max(1, len(audios[i]) * _FRAMES_PER_SECOND // SAMPLE_RATE) for i in scored]
        aligned = self._whisper.model.align(encoded, start, tokens, frames)
        for i, ids, result in zip(scored, tokens, aligned, strict=True):
            results[i] = [
                Logprob(tokenizer.decode([token]), math.log(max(probability, 1e-30)))
                for token, probability in zip(ids, result.text_token_probs, strict=False)
            ]
        return results


def _digest(audio: np.ndarray) -> bytes:
    """What tells one piece of audio from another (its samples), for ``Recognizer._encode``."""
    samples = np.ascontiguousarray(audio, np.float32)
    return hashlib.blake2b(samples.tobytes(), digest_size=16).digest()


def _joined(prefix: str, rest: str) -> str:
    """The forced prefix and what Whisper wrote after it, should a decode leave the prefix out."""
    if not rest or rest[0] in ".,!?;:'":
        return prefix + rest
    return f"{prefix} {rest}"


def window_for(duration_s: float) -> int:
    return next((w for w in WINDOWS_S if duration_s + _MARGIN_S <= w), WINDOWS_S[-1])


def is_repetitive(text: str) -> bool:
    """Whether one word occurs 5 times in a row, a 2- to 4-word phrase 3 times,
    or the text starts over at its end ("What time is it? What time").

    People say "no, no, no"; Whisper stuck in a loop says far more, and a
    window much longer than the speech tempts it to say the sentence again.
    """
    words = [w.lower() for w in _WORD.findall(text)]
    if _starts_over(words):
        return True
    for size in range(1, 5):
        max_repeats = 5 if size == 1 else 3
        for start in range(len(words) - size * max_repeats + 1):
            phrase = words[start : start + size]
            if all(words[start + k * size : start + (k + 1) * size] == phrase for k in range(max_repeats)):
                return True
    return False


def _starts_over(words: list[str]) -> bool:
    """Whether the last 2+ words repeat the first ones after a sentence of 3+ words."""
    return any(words[start:] == words[: len(words) - start] for start in range(3, len(words) - 1))


#: What Whisper writes for silence or noise; a transcript of only this is no speech.
_NON_SPEECH = re.compile(r"^\s*(\[[^\]]*\]|\([^)]*\)|♪+|\.+)?\s*$")


def clean(text: str) -> str:
    text = " ".join(text.split())
    return "" if _NON_SPEECH.match(text) else text
