"""``livegen bench``: the benchmarks, each named here and imported only when run.

Each benchmark's own options stay beside its load generator in ``bench/`` (its ``command``),
where its figures are computed; this module is the group that lists them. Add one with a line
in ``BENCHES``.
"""

from __future__ import annotations

import click

from livegen.cli.lazy import LazyGroup

#: ``livegen bench <name>`` -> "module:click_command", loaded on use.
BENCHES: dict[str, str] = {
    "voice-model": "livegen.bench.voice_model:command",
    "voice-lockstep": "livegen.bench.voice_duplex:command",
    "voice-barge-in": "livegen.bench.voice_barge_in:command",
    "world-session": "livegen.bench.world_session:world_session",
    "voice-session": "livegen.bench.voice_session:voice_session",
    "world-workers": "livegen.bench.world_workers:world_workers",
    "world-model": "livegen.bench.world_model:command",
    "world-stream": "livegen.bench.world_stream:command",
    "voice-conversations": "livegen.bench.voice_conversations:command",
    "voice-faults": "livegen.bench.voice_faults:command",
    "churn": "livegen.bench.churn:command",
    "voice-webrtc": "livegen.bench.voice_webrtc:command",
    "voice-tools": "livegen.bench.voice_tools:command",
    "voice-preambles": "livegen.bench.voice_preambles:command",
    "fuzz": "livegen.bench.fuzz:command",
    "audio-api": "livegen.bench.audio_api:command",
    "voice-live": "livegen.bench.voice_live:command",
}

#: Old ``livegen bench`` names -> the name now: they still run, hidden from the list. "duplex" is
#: vllm-omni's wire dialect; the native full-duplex models are lockstep models.
BENCH_ALIASES: dict[str, str] = {"voice-duplex": "voice-lockstep"}


@click.group(cls=LazyGroup, lazy=BENCHES, aliases=BENCH_ALIASES)
def bench() -> None:
    """Benchmarks: each prints medians and ratios against a baseline run in the same process."""
