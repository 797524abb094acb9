"""Speech for the fake microphone: espeak-ng (from espeakng-loader) through ctypes, written as a WAV.

A question spoken by a real synthesizer, padded with silence before and after,
so a server-side voice activity detector sees one clean turn. espeak-ng is
GPL and livegen keeps it out of its own process (tests check that), so the
tests call ``write_speech``, which runs this file as a child process.
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_POS_CHARACTERS = 1
_ESPEAK_CHARS_AUTO = 0
_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)


def synthesize(text: str, voice: str = "en-us", words_per_minute: int = 150) -> tuple[np.ndarray, int]:
    """``text`` spoken by espeak-ng: int16 mono samples and their rate."""
    import espeakng_loader

    library = ctypes.cdll.LoadLibrary(espeakng_loader.get_library_path())
    data_path = espeakng_loader.get_data_path().encode()
    rate = library.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, ctypes.c_char_p(data_path), 0)
    if rate <= 0:
        raise RuntimeError("espeak-ng did not initialise")
    chunks: list[np.ndarray] = []

    def collect(wav: ctypes._Pointer, num_samples: int, events: int) -> int:  # type: ignore[type-arg]
        if num_samples > 0:
            chunks.append(np.ctypeslib.as_array(wav, shape=(num_samples,)).copy())
        return 0

    callback = _CALLBACK(collect)
    library.espeak_SetSynthCallback(callback)
    library.espeak_SetVoiceByName(voice.encode())
    library.espeak_SetParameter(1, words_per_minute, 0)  # espeakRATE
    encoded = text.encode()
    status = library.espeak_Synth(
        ctypes.c_char_p(encoded), len(encoded) + 1, 0, _POS_CHARACTERS, 0, _ESPEAK_CHARS_AUTO, None, None
    )
    library.espeak_Synchronize()
    if status != 0 or not chunks:
        raise RuntimeError(f"espeak-ng could not speak {text!r} (status {status})")
    return np.concatenate(chunks).astype(np.int16), int(rate)


def read_speech(path: Path, rate: int) -> bytes:
    """A WAV written here, as PCM16 at ``rate`` (the wire's 24 kHz, the detector's 16 kHz)."""
    import soxr

    with wave.open(str(path)) as source:
        spoken_rate = source.getframerate()
        samples = np.frombuffer(source.readframes(source.getnframes()), "<i2").astype(np.float32) / 32768
    return bytes((np.clip(soxr.resample(samples, spoken_rate, rate), -1, 1) * 32767).astype("<i2").tobytes())


def write_question(path: Path, text: str, lead_s: float = 1.0, tail_s: float = 6.0) -> Path:
    """A WAV of ``text`` between ``lead_s`` and ``tail_s`` seconds of silence."""
    return write_speech(path, [(lead_s, text)], tail_s)


def write_speech(
    path: Path, parts: list[tuple[float, str]], tail_s: float = 6.0, voice: str = "en-us"
) -> Path:
    """A WAV of utterances, each after its seconds of silence: ``[(1.0, "hello"), (2.5, "bye")]``."""
    request = json.dumps({"path": str(path), "parts": parts, "tail_s": tail_s, "voice": voice})
    subprocess.run([sys.executable, __file__, request], check=True, timeout=60)
    return path


def _write_speech_here(path: Path, parts: list[tuple[float, str]], tail_s: float, voice: str) -> None:
    pieces: list[np.ndarray] = []
    rate = 0
    for silence_s, text in parts:
        samples, rate = synthesize(text, voice)
        pieces += [np.zeros(int(rate * silence_s), dtype=np.int16), samples]
    pieces.append(np.zeros(int(rate * tail_s), dtype=np.int16))
    audio = np.concatenate(pieces)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(audio.tobytes())


if __name__ == "__main__":
    arguments = json.loads(sys.argv[1])
    parts = [tuple(p) for p in arguments["parts"]]
    _write_speech_here(Path(arguments["path"]), parts, arguments["tail_s"], arguments["voice"])
