"""Time to first audio of each voice, local and remote side by side: ``voice-model --part voices``.

Local is what a session without ``--tts-base-url`` waits for: the cascade's
own worker speaks one piece (Piper or espeak-ng, in a worker process) and
the piece is the first audio. Remote is what a session with
``--tts-base-url`` waits for: the same piece asked of another livegen's
``POST /v1/audio/speech`` on loopback (a ``livegen serve`` subprocess), read
by the cascade's own remote voice (``remote_tts.RemoteVoice``) until its
first chunk arrives; the time to the whole piece is reported too. Each of
OpenAI's voice names, with the cascade voice it speaks with, in one table.
Both sides share the machine's cores, as they would on one host.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

#: A first piece of an answer, as the sentence splitter would send it.
PIECE = "Sure, I can help you with that."
ROUNDS = 3


def measure(model: Any, rounds: int = ROUNDS) -> dict[str, Any]:
    """{voice: {"speaks_with", "local_ms", "remote_first_ms", "remote_whole_ms"}} (medians)."""
    from livegen.models.cascade import voices

    results: dict[str, Any] = {}
    for voice in voices.OPENAI_VOICES:
        model.speak(PIECE, voice).result(timeout=120)  # warm: the engine's first call loads it
        local = []
        for _ in range(rounds):
            began = time.perf_counter()
            model.speak(PIECE, voice).result(timeout=120)
            local.append(1000 * (time.perf_counter() - began))
        results[voice] = {"speaks_with": voices.resolve(voice), "local_ms": statistics.median(local)}
    with _another_livegen() as base_url:
        remote = asyncio.run(_remote_times(base_url, list(results), rounds))
    for voice, (first, whole) in remote.items():
        results[voice].update(remote_first_ms=first, remote_whole_ms=whole)
    return results


async def _remote_times(base_url: str, names: list[str], rounds: int) -> dict[str, tuple[float, float]]:
    from livegen.models.cascade import remote, remote_tts

    stage = remote.Stage("tts", base_url, None, 30.0)
    voice = remote_tts.RemoteVoice(stage, "tts-1")
    times: dict[str, tuple[float, float]] = {}
    try:
        for name in names:
            await _first_and_whole(voice, name)  # warm: the other server's engine for this voice
            pairs = [await _first_and_whole(voice, name) for _ in range(rounds)]
            times[name] = (statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs))
    finally:
        await stage.aclose()
    return times


async def _first_and_whole(voice: Any, name: str) -> tuple[float, float]:
    began = time.perf_counter()
    first = 0.0
    async for _chunk in voice.speak(PIECE, name).chunks():
        first = first or 1000 * (time.perf_counter() - began)
    return first, 1000 * (time.perf_counter() - began)


@contextlib.contextmanager
def _another_livegen() -> Iterator[str]:
    """``livegen serve`` in a subprocess on a loopback port; its ``/v1`` URL once it is ready."""
    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, "-m", "livegen", "serve", "--port", str(port), "--world-model", "none"]
    process = subprocess.Popen(argv, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            if process.poll() is not None:
                raise RuntimeError("the other livegen exited")
            time.sleep(0.3)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(timeout=30)


def render(results: dict[str, Any]) -> list[str]:
    lines = [
        f"voices: time to first audio of {PIECE!r} (median), local worker vs another livegen's "
        "/v1/audio/speech on loopback",
        f"  {'voice':<9}{'speaks with':<24}{'local':>9}{'remote first':>14}{'remote whole':>14}",
    ]
    for voice, row in results.items():
        first, whole = (row.get(key, float("nan")) for key in ("remote_first_ms", "remote_whole_ms"))
        lines.append(
            f"  {voice:<9}{row['speaks_with']:<24}{row['local_ms']:7.0f}ms{first:12.0f}ms{whole:12.0f}ms"
        )
    return lines
